#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace meshnode::agent {

/// What the agent remembers about an enrolled pod across restarts (one JSON file per pod).
struct PodRecord {
  std::string uid;              ///< ZDS workload uid
  std::string name;
  std::string namespace_;
  std::string service_account;
  std::string netns;            ///< path the agent opened (after the --netns-root prefix)
  std::vector<std::string> ips; ///< pod IPs as text, from the ADD event

  friend bool operator==(const PodRecord&, const PodRecord&) = default;
};

/// JSON form: {"uid","name","namespace","serviceAccount","netns","ips":[..]}. Pure.
[[nodiscard]] std::string to_json(const PodRecord& record);
/// Parses `to_json` output; Errc::kConfig naming the missing/mistyped field. Pure.
[[nodiscard]] base::Result<PodRecord> record_from_json(std::string_view text);

/// Enrolled-pod records under `<run_dir>/pods/`, one `<escaped uid>.json` each, written atomically
/// (temp file + rename) so a crash never leaves half a record. Blocking file I/O; not thread-safe
/// (the agent serializes calls).
class PodStore {
 public:
  /// Creates `<run_dir>/pods` (0700) if needed. Errc::kIo naming the directory.
  [[nodiscard]] static base::Result<PodStore> open(const std::string& run_dir);

  /// Writes (or replaces) the record of `record.uid`. Errc::kIo naming the file.
  [[nodiscard]] base::Result<void> save(const PodRecord& record);
  /// Removes the record of `uid`; absent is fine. Errc::kIo otherwise.
  [[nodiscard]] base::Result<void> erase(std::string_view uid);
  /// Every readable record; unreadable files are skipped and reported in `broken` (file: why).
  [[nodiscard]] std::vector<PodRecord> load_all(std::vector<std::string>* broken = nullptr) const;

  [[nodiscard]] const std::string& dir() const noexcept { return dir_; }

 private:
  explicit PodStore(std::string dir) : dir_(std::move(dir)) {}
  [[nodiscard]] std::string path_of(std::string_view uid) const;
  std::string dir_;
};

}  // namespace meshnode::agent
