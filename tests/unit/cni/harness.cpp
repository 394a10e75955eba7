#include "harness.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

namespace meshnode::cni::testing {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : static_cast<int>(left);
}

std::pair<base::UniqueFd, base::UniqueFd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  return {base::UniqueFd(fds[0]), base::UniqueFd(fds[1])};
}

std::string header_value(std::string_view head, std::string_view name) {
  std::string lower(head);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::string key = "\r\n" + std::string(name) + ":";
  const auto at = lower.find(key);
  if (at == std::string::npos) return {};
  const auto begin = at + key.size();
  std::string value(head.substr(begin, head.find("\r\n", begin) - begin));
  while (!value.empty() && value.front() == ' ') value.erase(0, 1);
  return value;
}

}  // namespace

FakeAgent::FakeAgent(std::filesystem::path socket_path) : path_(std::move(socket_path)) {
  listener_.reset(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
  std::filesystem::remove(path_);
  if (::bind(listener_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener_.get(), 16) != 0) {
    throw std::runtime_error("fake agent: bind/listen " + path_.string() + ": " + std::strerror(errno));
  }
  auto [r, w] = make_pipe();
  stop_read_ = std::move(r);
  stop_write_ = std::move(w);
  thread_ = std::thread([this] { serve(); });
}

FakeAgent::~FakeAgent() {
  (void)::write(stop_write_.get(), "x", 1);
  thread_.join();
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void FakeAgent::reply(const std::string& path, Reply reply) {
  std::lock_guard lock(mu_);
  replies_[path] = std::move(reply);
}

std::vector<FakeAgent::Seen> FakeAgent::seen() const {
  std::lock_guard lock(mu_);
  return seen_;
}

void FakeAgent::serve() {
  while (true) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_read_.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    base::UniqueFd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (conn) handle(std::move(conn));
  }
}

void FakeAgent::handle(base::UniqueFd conn) {
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  std::string in;
  std::size_t head_end = std::string::npos;
  std::size_t need = 0;
  char buf[8192];
  while (true) {
    if (head_end == std::string::npos && (head_end = in.find("\r\n\r\n")) != std::string::npos) {
      need = head_end + 4 + std::stoul("0" + header_value(in.substr(0, head_end + 2), "content-length"));
    }
    if (head_end != std::string::npos && in.size() >= need) break;
    pollfd p{conn.get(), POLLIN, 0};
    if (::poll(&p, 1, ms_left(deadline)) <= 0) return;
    const ssize_t n = ::read(conn.get(), buf, sizeof buf);
    if (n <= 0) return;
    in.append(buf, static_cast<std::size_t>(n));
  }
  const std::string head = in.substr(0, head_end + 2);
  Seen s;
  const auto sp1 = head.find(' ');
  const auto sp2 = head.find(' ', sp1 + 1);
  s.method = head.substr(0, sp1);
  s.path = head.substr(sp1 + 1, sp2 - sp1 - 1);
  s.content_type = header_value(head, "content-type");
  s.body = in.substr(head_end + 4, need - head_end - 4);
  Reply r;
  {
    std::lock_guard lock(mu_);
    seen_.push_back(s);
    if (auto it = replies_.find(s.path); it != replies_.end()) {
      r = it->second;
    } else {
      r = Reply{404, "no route"};
    }
    if (r.hang) {
      hung_.push_back(std::move(conn));
      return;
    }
  }
  const std::string out = "HTTP/1.1 " + std::to_string(r.status) +
                          " X\r\nContent-Length: " + std::to_string(r.body.size()) +
                          "\r\nConnection: close\r\n\r\n" + r.body;
  (void)::send(conn.get(), out.data(), out.size(), MSG_NOSIGNAL);
}

ProcessResult run_process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                          const std::string& stdin_text, std::chrono::milliseconds timeout) {
  // Writing stdin to a child that exited early must be an EPIPE, not a dead test process.
  static const bool sigpipe_ignored = (::signal(SIGPIPE, SIG_IGN), true);
  (void)sigpipe_ignored;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto [in_r, in_w] = make_pipe();
  auto [out_r, out_w] = make_pipe();
  auto [err_r, err_w] = make_pipe();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_r.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), 2);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  for (const char* keep : {"ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS"}) {
    if (const char* v = std::getenv(keep); v != nullptr && !env.contains(keep))
      env_strings.push_back(std::string(keep) + "=" + v);
  }
  std::vector<char*> envp, args;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error(std::string("posix_spawn ") + argv[0] + ": " + std::strerror(rc));
  in_r.reset();
  out_w.reset();
  err_w.reset();
  (void)::fcntl(in_w.get(), F_SETFL, O_NONBLOCK);

  ProcessResult run;
  std::string_view to_write = stdin_text;
  if (to_write.empty()) in_w.reset();
  bool killed = false;
  while (out_r || err_r) {
    std::vector<pollfd> fds;
    if (in_w) fds.push_back({in_w.get(), POLLOUT, 0});
    if (out_r) fds.push_back({out_r.get(), POLLIN, 0});
    if (err_r) fds.push_back({err_r.get(), POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), ms_left(deadline));
    if (n == 0) {
      ::kill(pid, SIGKILL);  // our own child, by pid
      killed = true;
      break;
    }
    if (n < 0) continue;
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      if (in_w && p.fd == in_w.get()) {
        const ssize_t w = ::write(in_w.get(), to_write.data(), to_write.size());
        if (w > 0) to_write.remove_prefix(static_cast<std::size_t>(w));
        if (w < 0 || to_write.empty()) in_w.reset();  // EPIPE: the child stopped reading
        continue;
      }
      char buf[8192];
      const ssize_t r = ::read(p.fd, buf, sizeof buf);
      auto& fd = p.fd == out_r.get() ? out_r : err_r;
      auto& sink = p.fd == out_r.get() ? run.out : run.err;
      if (r <= 0) {
        fd.reset();
      } else {
        sink.append(buf, static_cast<std::size_t>(r));
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  run.exit_code = (!killed && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  run.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  return run;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "mn-cni-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string random_hex6() {
  std::random_device rd;
  char buf[8];
  std::snprintf(buf, sizeof buf, "%06x", rd() & 0xffffff);
  return buf;
}

}  // namespace meshnode::cni::testing
