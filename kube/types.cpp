#include "kube/types.hpp"

namespace meshnode::kube {

StringMap::StringMap(std::vector<Entry> entries) : entries_(std::move(entries)) {
  // Stable, so that of two equal keys the later one ends up last; then keep the last of each run.
  std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) { return a.first < b.first; });
  std::vector<Entry> unique;
  unique.reserve(entries_.size());
  for (auto& e : entries_) {
    if (!unique.empty() && unique.back().first == e.first) {
      unique.back().second = std::move(e.second);
    } else {
      unique.push_back(std::move(e));
    }
  }
  unique.shrink_to_fit();
  entries_ = std::move(unique);
}

const std::string* StringMap::find(std::string_view key) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const Entry& e, std::string_view k) { return e.first < k; });
  return it != entries_.end() && it->first == key ? &it->second : nullptr;
}

bool is_expired(const Status& status) {
  return status.code == 410 || status.reason == "Expired" || status.reason == "Gone";
}

std::string_view to_string(EventType type) noexcept {
  switch (type) {
    case EventType::kAdded: return "ADDED";
    case EventType::kModified: return "MODIFIED";
    case EventType::kDeleted: return "DELETED";
    case EventType::kBookmark: return "BOOKMARK";
    case EventType::kError: return "ERROR";
  }
  return "UNKNOWN";
}

std::string object_key(const ObjectMeta& meta) {
  if (meta.namespace_.empty()) return meta.name;
  std::string key;
  key.reserve(meta.namespace_.size() + 1 + meta.name.size());
  key.append(meta.namespace_).append("/").append(meta.name);
  return key;
}

}  // namespace meshnode::kube
