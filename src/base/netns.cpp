#include "base/netns.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>

#include <cerrno>
#include <optional>

#include "base/check.hpp"

namespace meshnode::base {

Result<Netns> Netns::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail_errno("open netns " + path, errno);
  return from_fd(UniqueFd(fd), path);
}

Result<Netns> Netns::from_fd(UniqueFd fd, std::string description) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail_errno("fstat netns " + description, errno);
  return Netns(std::move(fd), std::move(description), st.st_dev, st.st_ino);
}

Result<Netns> Netns::current() { return open("/proc/thread-self/ns/net"); }

namespace {

// The namespace a thread runs in outside run_in, opened once per thread: a proxy worker creates
// a socket in a pod's netns for every inbound connection, and reopening /proc/thread-self/ns/net
// each time cost three syscalls (open, fstat, close) of about forty per connection.
thread_local std::optional<Netns> home_netns;
thread_local int run_in_depth = 0;

}  // namespace

Result<void> Netns::run_in(const std::function<void()>& fn) const {
  // Nested calls restore the enclosing namespace, which is not the thread's home one.
  std::optional<Netns> nested;
  const Netns* original = nullptr;
  if (run_in_depth == 0) {
    if (!home_netns) {
      auto opened = current();
      if (!opened) return std::unexpected(opened.error());
      home_netns.emplace(std::move(*opened));
    }
    original = &*home_netns;
  } else {
    auto opened = current();
    if (!opened) return std::unexpected(opened.error());
    nested.emplace(std::move(*opened));
    original = &*nested;
  }
  if (::setns(fd_.get(), CLONE_NEWNET) != 0) return fail_errno("setns into " + description_, errno);
  // Restores on every exit path, an exception from `fn` included: a thread left in a pod's
  // namespace would create every later socket there.
  struct Restore {
    const Netns* original;
    ~Restore() {
      --run_in_depth;
      MESHNODE_CHECK(::setns(original->fd(), CLONE_NEWNET) == 0, "cannot restore the thread's network namespace");
    }
  };
  ++run_in_depth;
  const Restore restore{original};
  fn();
  return {};
}

}  // namespace meshnode::base
