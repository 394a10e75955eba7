#include "integration/test_util.hpp"

#include <cstdio>
#include <fstream>
#include <cstdlib>
#include <random>
#include <sstream>

namespace meshnode::integration {

std::string random_prefix() {
  std::random_device rd;
  std::uniform_int_distribution<int> dist(0, 0xffffff);
  char buf[16];
  std::snprintf(buf, sizeof buf, "mn-%06x", dist(rd));
  return buf;
}

std::map<std::string, std::string> parse_env(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (auto eq = line.find('='); eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

std::string tail_lines(const std::string& text, std::size_t n) {
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  std::string out;
  for (std::size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) out += lines[i] + "\n";
  return out;
}

double metric_sum(std::string_view text, std::string_view metric, const std::vector<std::string>& labels) {
  double sum = 0;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(metric)) continue;
    const char next = line.size() > metric.size() ? line[metric.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    bool all = true;
    for (const auto& l : labels) all = all && line.find(l) != std::string::npos;
    if (!all) continue;
    if (const auto space = line.rfind(' '); space != std::string::npos) {
      sum += std::strtod(line.c_str() + space + 1, nullptr);
    }
  }
  return sum;
}

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

}  // namespace meshnode::integration
