#include "integration/process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

extern char** environ;

namespace meshnode::integration {
namespace {

int decode_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string truncated(const std::string& s, std::size_t max = 2000) {
  if (s.size() <= max) return s;
  return s.substr(0, max / 2) + "\n[...]\n" + s.substr(s.size() - max / 2);
}

}  // namespace

bool eventually(std::chrono::milliseconds timeout, const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string RunResult::describe() const {
  std::ostringstream os;
  os << (timed_out ? "TIMED OUT" : "exit " + std::to_string(exit_code)) << "\n--- stdout:\n"
     << truncated(out) << "\n--- stderr:\n"
     << truncated(err);
  return os.str();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

Process Process::spawn(const std::vector<std::string>& argv, Options options) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int pipe_fds[2] = {-1, -1};
  if (options.stdin_pipe) {
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[0], 0);
  } else {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_addopen(&actions, 1, options.stdout_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, options.stderr_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  Process p;
  const int rc = posix_spawnp(&p.pid_, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (pipe_fds[0] >= 0) close(pipe_fds[0]);
  if (rc != 0) {
    if (pipe_fds[1] >= 0) close(pipe_fds[1]);
    p.pid_ = -1;
    throw std::runtime_error("cannot spawn " + argv[0] + ": " + std::strerror(rc));
  }
  p.stdin_fd_ = pipe_fds[1];
  p.stdout_path_ = std::move(options.stdout_path);
  p.stderr_path_ = std::move(options.stderr_path);
  return p;
}

Process::Process(Process&& other) noexcept { *this = std::move(other); }

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    reset();
    pid_ = std::exchange(other.pid_, -1);
    stdin_fd_ = std::exchange(other.stdin_fd_, -1);
    exit_code_ = std::exchange(other.exit_code_, std::nullopt);
    stdout_path_ = std::move(other.stdout_path_);
    stderr_path_ = std::move(other.stderr_path_);
  }
  return *this;
}

Process::~Process() { reset(); }

void Process::reset() noexcept {
  if (pid_ > 0 && running()) terminate();
  close_stdin();
  pid_ = -1;
}

bool Process::running() {
  if (pid_ <= 0 || exit_code_) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = decode_status(status);
    return false;
  }
  return r == 0;
}

std::optional<int> Process::wait_for(std::chrono::milliseconds timeout) {
  eventually(timeout, [&] { return !running(); });
  return exit_code_;
}

void Process::signal(int sig) {
  if (running()) ::kill(pid_, sig);
}

int Process::terminate(std::chrono::milliseconds grace) {
  signal(SIGTERM);
  if (auto code = wait_for(grace)) return *code;
  signal(SIGKILL);
  return wait_for(std::chrono::seconds(5)).value_or(-1);
}

bool Process::write_stdin(std::string_view text) {
  while (stdin_fd_ >= 0 && !text.empty()) {
    ssize_t n = ::write(stdin_fd_, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return stdin_fd_ >= 0;
}

void Process::close_stdin() {
  if (stdin_fd_ >= 0) close(stdin_fd_);
  stdin_fd_ = -1;
}

std::string Process::stdout_text() const { return read_file(stdout_path_); }
std::string Process::stderr_text() const { return read_file(stderr_path_); }

int Process::count_lines(std::string_view needle) const {
  std::istringstream in(stdout_text());
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) ++n;
  }
  return n;
}

bool Process::wait_for_line(std::string_view needle, std::chrono::milliseconds timeout) {
  bool found = false;
  eventually(timeout, [&] {
    const bool alive = running();
    found = count_lines(needle) > 0;
    return found || !alive;
  });
  return found || count_lines(needle) > 0;
}

RunResult run(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
              const std::string& scratch_dir) {
  static std::atomic<int> counter{0};
  const std::string base = scratch_dir + "/run-" + std::to_string(getpid()) + "-" +
                           std::to_string(counter++);
  RunResult result;
  Process p = Process::spawn(argv, {.stdout_path = base + ".out", .stderr_path = base + ".err"});
  if (auto code = p.wait_for(timeout)) {
    result.exit_code = *code;
  } else {
    result.timed_out = true;
    p.terminate(std::chrono::seconds(2));
  }
  result.out = read_file(base + ".out");
  result.err = read_file(base + ".err");
  unlink((base + ".out").c_str());
  unlink((base + ".err").c_str());
  return result;
}

int count_events(const Process& p, std::string_view event) {
  return p.count_lines("\"event\": \"" + std::string(event) + "\"");
}

double last_field(const Process& p, std::string_view event, std::string_view key) {
  std::istringstream in(p.stdout_text());
  const std::string needle = "\"event\": \"" + std::string(event) + "\"";
  const std::string field = "\"" + std::string(key) + "\": ";
  double value = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) == std::string::npos) continue;
    if (auto at = line.find(field); at != std::string::npos) value = std::strtod(line.c_str() + at + field.size(), nullptr);
  }
  return value;
}

std::optional<std::pair<long, long>> finish_loop(Process& loop) {
  loop.close_stdin();
  if (!loop.wait_for(std::chrono::seconds(20))) return std::nullopt;
  const double attempted = last_field(loop, "summary", "attempted");
  const double failed = last_field(loop, "summary", "failed");
  if (attempted < 0 || failed < 0) return std::nullopt;
  return std::pair{static_cast<long>(attempted), static_cast<long>(failed)};
}

}  // namespace meshnode::integration
