#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshnode::integration {

using std::chrono::milliseconds;
using std::chrono::seconds;

/// Polls `condition` every 20 ms until it returns true or `timeout` passes.
/// @returns whether the condition became true in time. Never blocks longer than `timeout` plus
///          one evaluation of the condition.
bool eventually(std::chrono::milliseconds timeout, const std::function<bool()>& condition);

/// Outcome of a finished command.
struct RunResult {
  int exit_code = -1;    ///< exit status, 128 + signal if killed, -1 if it timed out
  bool timed_out = false;
  std::string out;       ///< everything it wrote to stdout
  std::string err;       ///< everything it wrote to stderr
  /// One line for assertion messages: exit code, stdout and stderr (truncated).
  [[nodiscard]] std::string describe() const;
};

/// A child process (posix_spawnp) whose stdout and stderr go to files, optionally with a pipe on
/// its stdin. Move-only; the destructor terminates it (SIGTERM, then SIGKILL after 5 s) if it is
/// still running. Single-threaded use.
class Process {
 public:
  struct Options {
    std::string stdout_path;   ///< required
    std::string stderr_path;   ///< required
    bool stdin_pipe = false;   ///< else stdin is /dev/null
  };

  /// Starts argv[0] (PATH lookup). Throws std::runtime_error if it cannot be spawned.
  static Process spawn(const std::vector<std::string>& argv, Options options);

  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  [[nodiscard]] pid_t pid() const { return pid_; }
  /// Whether the child has not exited yet (reaps it if it has).
  [[nodiscard]] bool running();
  /// Waits up to `timeout` for the child to exit. @returns its exit code (128 + signal), or
  /// nullopt if it still runs.
  std::optional<int> wait_for(std::chrono::milliseconds timeout);
  /// Sends `sig` if the child still runs.
  void signal(int sig);
  /// SIGTERM, wait up to `grace`, then SIGKILL. @returns the exit code (128 + signal).
  int terminate(std::chrono::milliseconds grace = std::chrono::seconds(5));
  /// Writes `text` to the stdin pipe (all of it; false if there is no pipe or it broke).
  bool write_stdin(std::string_view text);
  /// Closes the write end of the stdin pipe (the child reads EOF).
  void close_stdin();
  /// Current content of the child's stdout / stderr file.
  [[nodiscard]] std::string stdout_text() const;
  [[nodiscard]] std::string stderr_text() const;
  /// Waits until a stdout line contains `needle`, the child exits, or `timeout` passes.
  bool wait_for_line(std::string_view needle, std::chrono::milliseconds timeout);
  /// Number of stdout lines containing `needle`.
  [[nodiscard]] int count_lines(std::string_view needle) const;

 private:
  void reset() noexcept;
  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  std::optional<int> exit_code_;
  std::string stdout_path_;
  std::string stderr_path_;
};

/// Runs argv to completion with a deadline, capturing stdout/stderr via files in `scratch_dir`.
/// A command still running at the deadline is killed and reported with timed_out = true.
RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::string& scratch_dir);

/// Number of stdout lines of a tools/*.py peer (one JSON object per line) with `"event": "<event>"`.
int count_events(const Process& p, std::string_view event);
/// Value of the numeric field `key` in the last line containing `"event": "<event>"` (-1 if none).
double last_field(const Process& p, std::string_view event, std::string_view key);

/// Closes the stdin of a tools/zds_peer.py `loop` and returns its summary (attempted, failed), or
/// nullopt when it did not exit within 20 s or printed no summary.
std::optional<std::pair<long, long>> finish_loop(Process& loop);

/// Whole content of a file ("" if it does not exist).
std::string read_file(const std::string& path);

}  // namespace meshnode::integration
