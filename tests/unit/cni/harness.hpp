#pragma once

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/unique_fd.hpp"

namespace meshnode::cni::testing {

/// A node agent stand-in: HTTP/1.1 on a Unix socket, one request per connection, scripted replies
/// per path, every request recorded. Runs on its own thread; every wait has a deadline.
class FakeAgent {
 public:
  struct Reply {
    int status = 200;
    std::string body;
    bool hang = false;  ///< read the request, never answer (until the agent is destroyed)
  };
  struct Seen {
    std::string method, path, content_type, body;
  };

  explicit FakeAgent(std::filesystem::path socket_path);
  ~FakeAgent();
  FakeAgent(const FakeAgent&) = delete;
  FakeAgent& operator=(const FakeAgent&) = delete;

  void reply(const std::string& path, Reply reply);
  [[nodiscard]] std::vector<Seen> seen() const;

 private:
  void serve();
  void handle(base::UniqueFd conn);

  std::filesystem::path path_;
  base::UniqueFd listener_;
  base::UniqueFd stop_read_, stop_write_;
  mutable std::mutex mu_;
  std::map<std::string, Reply> replies_;
  std::vector<Seen> seen_;
  std::vector<base::UniqueFd> hung_;
  std::thread thread_;
};

/// Result of running a process to completion.
struct ProcessResult {
  int exit_code = -1;  ///< -1 if killed at the deadline or by a signal
  std::string out, err;
  std::chrono::milliseconds elapsed{};
};

/// Runs `argv[0]` with exactly `env` (plus ASAN_OPTIONS/LSAN_OPTIONS/UBSAN_OPTIONS if set), writes
/// `stdin_text` to its stdin, collects stdout/stderr; SIGKILLs it at `timeout`.
ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                          const std::string& stdin_text,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30));

/// A fresh private temp directory, removed (recursively) in the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// Six random lowercase hex digits for unique namespace/bridge names.
std::string random_hex6();

}  // namespace meshnode::cni::testing
