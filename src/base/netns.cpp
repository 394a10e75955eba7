#include "base/netns.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>

#include <cerrno>

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

Result<void> Netns::run_in(const std::function<void()>& fn) const {
  auto original = current();
  if (!original) return std::unexpected(original.error());
  if (::setns(fd_.get(), CLONE_NEWNET) != 0) return fail_errno("setns into " + description_, errno);
  fn();
  MESHNODE_CHECK(::setns(original->fd(), CLONE_NEWNET) == 0, "cannot restore the thread's network namespace");
  return {};
}

}  // namespace meshnode::base
