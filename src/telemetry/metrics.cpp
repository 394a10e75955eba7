#include "telemetry/metrics.hpp"

#include <fmt/format.h>

#include "base/check.hpp"

namespace meshnode::telemetry {
namespace {

// HELP text escapes backslash and newline only (text format 0.0.4).
std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void render_labels(std::string& out, const Labels& labels) {
  if (labels.empty()) return;
  out += '{';
  bool first = true;
  for (const auto& [name, value] : labels) {
    if (!first) out += ',';
    first = false;
    out += name;
    out += "=\"";
    out += value.empty() ? std::string("unknown") : escape_label_value(value);
    out += '"';
  }
  out += '}';
}

}  // namespace

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

MetricsRegistry::Series& MetricsRegistry::series(std::string_view name, std::string_view help, Type type,
                                                 Labels labels) {
  std::lock_guard lock(mutex_);
  auto it = families_.find(name);
  if (it == families_.end()) {
    it = families_.emplace(std::string(name), Family{type, std::string(help), {}, {}}).first;
  }
  Family& family = it->second;
  MESHNODE_CHECK(family.type == type, "metric registered as both counter and gauge");
  if (auto found = family.by_labels.find(labels); found != family.by_labels.end()) return *found->second;
  Series& created = family.series.emplace_back(labels);
  family.by_labels.emplace(std::move(labels), &created);
  return created;
}

Counter& MetricsRegistry::counter(std::string_view name, std::string_view help, Labels labels) {
  return series(name, help, Type::kCounter, std::move(labels)).counter;
}

Gauge& MetricsRegistry::gauge(std::string_view name, std::string_view help, Labels labels) {
  return series(name, help, Type::kGauge, std::move(labels)).gauge;
}

void MetricsRegistry::render_family(std::string& out, const std::string& name, const Family& family) {
  const bool is_counter = family.type == Type::kCounter;
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, escape_help(family.help), name,
                     is_counter ? "counter" : "gauge");
  for (const Series& s : family.series) {
    out += name;
    render_labels(out, s.labels);
    out += ' ';
    out += is_counter ? std::to_string(s.counter.value()) : std::to_string(s.gauge.value());
    out += '\n';
  }
}

std::string MetricsRegistry::render() const {
  std::string out;
  std::lock_guard lock(mutex_);
  for (const auto& [name, family] : families_) render_family(out, name, family);
  return out;
}

void register_build_info(MetricsRegistry& registry, std::string_view version) {
  registry
      .gauge("istio_build", "Istio component build info",
             {{"component", "meshnode"}, {"tag", std::string(version)}})
      .set(1);
}

}  // namespace meshnode::telemetry
