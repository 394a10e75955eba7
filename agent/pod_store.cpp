// Enrolled-pod records in the run dir (restart safety, issue 4).
#include "agent/pod_store.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/file_util.hpp"

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;
using nlohmann::json;
namespace fs = std::filesystem;

// File names from uids: keep [A-Za-z0-9._-], %XX-escape the rest ("ns/pod" → "ns%2Fpod").
std::string escape(std::string_view uid) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : uid) {
    if (std::isalnum(c) || c == '-' || c == '_' || (c == '.' && !out.empty())) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace

std::string to_json(const PodRecord& r) {
  json doc = {{"uid", r.uid},     {"name", r.name},   {"namespace", r.namespace_}, {"serviceAccount", r.service_account},
              {"netns", r.netns}, {"ips", r.ips}};
  return doc.dump(2) + "\n";
}

base::Result<PodRecord> record_from_json(std::string_view text) {
  json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return fail(Errc::kConfig, "pod record: not a JSON object");
  PodRecord r;
  for (auto [key, target] : {std::pair{"uid", &r.uid}, std::pair{"name", &r.name}, std::pair{"namespace", &r.namespace_},
                             std::pair{"serviceAccount", &r.service_account}, std::pair{"netns", &r.netns}}) {
    if (!doc.contains(key) || !doc[key].is_string()) return fail(Errc::kConfig, std::string("pod record: ") + key + " missing");
    *target = doc[key].get<std::string>();
  }
  if (r.uid.empty()) return fail(Errc::kConfig, "pod record: uid empty");
  if (doc.contains("ips")) {
    if (!doc["ips"].is_array()) return fail(Errc::kConfig, "pod record: ips must be a list");
    for (const json& ip : doc["ips"]) {
      if (!ip.is_string()) return fail(Errc::kConfig, "pod record: ips entries must be strings");
      r.ips.push_back(ip.get<std::string>());
    }
  }
  return r;
}

base::Result<PodStore> PodStore::open(const std::string& run_dir) {
  const std::string dir = run_dir + "/pods";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(Errc::kIo, "create run dir " + dir, ec);
  fs::permissions(dir, fs::perms::owner_all, ec);
  return PodStore(dir);
}

std::string PodStore::path_of(std::string_view uid) const { return dir_ + "/" + escape(uid) + ".json"; }

base::Result<void> PodStore::save(const PodRecord& record) {
  return write_file_atomically(path_of(record.uid), to_json(record), 0600);
}

base::Result<void> PodStore::erase(std::string_view uid) {
  const std::string path = path_of(uid);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return base::fail_errno("unlink " + path, errno);
  return {};
}

std::vector<PodRecord> PodStore::load_all(std::vector<std::string>* broken) const {
  std::vector<PodRecord> records;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    std::ostringstream text;
    text << in.rdbuf();
    auto record = record_from_json(text.str());
    if (record) {
      records.push_back(std::move(*record));
    } else if (broken != nullptr) {
      broken->push_back(entry.path().string() + ": " + record.error().context);
    }
  }
  std::ranges::sort(records, {}, &PodRecord::uid);
  return records;
}

}  // namespace meshnode::agent
