// Child processes for the iptables backend and policy routing (iptables-restore, ip).
#include "agent/exec.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "base/unique_fd.hpp"

extern char** environ;

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;
using base::UniqueFd;

std::string resolve(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* env = std::getenv("PATH");
  std::string path = env != nullptr ? env : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = std::min(path.find(':', start), path.size());
    const std::string dir = path.substr(start, end - start);
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
    start = end + 1;
  }
  return {};
}

struct Pipe {
  UniqueFd read, write;
};

base::Result<Pipe> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return base::fail_errno("pipe2", errno);
  return Pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::string describe(const std::vector<std::string>& argv) {
  std::string text;
  for (const auto& a : argv) text += (text.empty() ? "" : " ") + a;
  return text;
}

// Feeds stdin and drains stdout/stderr together so neither side can block the other.
// @returns false when the deadline passed first.
bool pump(UniqueFd& in, std::string_view input, UniqueFd& out, UniqueFd& err, ExecOutput& result,
          std::chrono::steady_clock::time_point deadline) {
  std::size_t written = 0;
  if (input.empty()) in.reset();
  // A blocking stdin could stall the pump past its deadline: fail as a missed deadline would.
  if (in && ::fcntl(in.get(), F_SETFL, O_NONBLOCK) != 0) return false;
  while (out || err) {
    std::array<pollfd, 3> fds{pollfd{in.get(), POLLOUT, 0}, pollfd{out.get(), POLLIN, 0}, pollfd{err.get(), POLLIN, 0}};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0 && errno != EINTR) return false;
    if (in && (fds[0].revents & (POLLOUT | POLLERR | POLLHUP)) != 0) {
      const ssize_t n = ::write(in.get(), input.data() + written, input.size() - written);
      if (n > 0) written += static_cast<std::size_t>(n);
      if (n < 0 && errno != EAGAIN) in.reset();
      if (written == input.size()) in.reset();
    }
    for (auto [fd, text, idx] : {std::tuple{&out, &result.out, 1}, std::tuple{&err, &result.err, 2}}) {
      if (!*fd || fds[idx].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(fd->get(), buf, sizeof buf);
      if (n > 0) text->append(buf, static_cast<std::size_t>(n));
      if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) fd->reset();
    }
  }
  return true;
}

}  // namespace

base::Result<ExecOutput> run_program(const std::vector<std::string>& argv, std::string_view input,
                                     std::chrono::milliseconds timeout, const std::vector<std::string>& extra_env) {
  if (argv.empty()) return fail(Errc::kInvalidArgument, "empty command");
  const std::string program = resolve(argv[0]);
  if (program.empty()) return fail(Errc::kNotFound, "program not found: " + argv[0]);
  auto in = make_pipe();
  auto out = make_pipe();
  auto err = make_pipe();
  if (!in || !out || !err) return fail(Errc::kIo, "cannot create pipes for " + argv[0]);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in->read.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, out->write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err->write.get(), 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Extra entries first: getenv(3) returns the first match, so they win over inherited ones.
  std::vector<char*> env;
  for (const auto& e : extra_env) env.push_back(const_cast<char*>(e.c_str()));
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  env.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, program.c_str(), &actions, nullptr, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return base::fail_errno("spawn " + program, rc);
  in->read.reset();
  out->write.reset();
  err->write.reset();
  ExecOutput result;
  // A child that exits before reading all of stdin must not kill us with SIGPIPE: block it on this
  // thread while pumping and swallow a pending one afterwards.
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ::pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  const bool finished =
      pump(in->write, input, out->read, err->read, result, std::chrono::steady_clock::now() + timeout);
  const timespec zero{};
  while (::sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
  }
  ::pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  if (!finished) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!finished) return fail(Errc::kTimeout, describe(argv) + ": killed after " + std::to_string(timeout.count()) + " ms");
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

base::Result<ExecOutput> run_checked(const std::vector<std::string>& argv, std::string_view input,
                                     std::chrono::milliseconds timeout) {
  auto result = run_program(argv, input, timeout);
  if (!result) return result;
  if (result->exit_code != 0) {
    std::string err = result->err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    return fail(Errc::kIo, describe(argv) + ": exit " + std::to_string(result->exit_code) + ": " + err);
  }
  return result;
}

}  // namespace meshnode::agent
