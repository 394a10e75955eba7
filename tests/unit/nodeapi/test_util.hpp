#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <utility>

#include "base/unique_fd.hpp"

namespace meshnode::nodeapi::testing {

/// Number of open fds of this process (entries of /proc/self/fd; the iterator's own fd is counted
/// each time, so two counts compare equal when nothing leaked).
inline std::size_t open_fd_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

/// A connected AF_UNIX SOCK_SEQPACKET pair: `a` plays one side, `b` the other.
struct SeqpacketPair {
  base::UniqueFd a;
  base::UniqueFd b;
};

inline SeqpacketPair seqpacket_pair() {
  int fds[2] = {-1, -1};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
  return {base::UniqueFd(fds[0]), base::UniqueFd(fds[1])};
}

/// This process's network namespace, opened fresh (a real netns fd, as the agent sends).
inline base::UniqueFd open_own_netns() {
  base::UniqueFd fd(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  return fd;
}

/// (st_dev, st_ino) of what `fd` refers to: equal pairs mean the same namespace.
inline std::pair<dev_t, ino_t> inode_of(int fd) {
  struct stat st {};
  EXPECT_EQ(::fstat(fd, &st), 0);
  return {st.st_dev, st.st_ino};
}

inline bool is_cloexec(int fd) { return (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }

/// A unique path for a Unix socket under the temp dir, removed (if still there) in the destructor.
class TempSocketPath {
 public:
  explicit TempSocketPath(const std::string& tag) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (std::filesystem::temp_directory_path() / ("mn-zds-" + tag + "-" + std::to_string(::getpid()) +
                                                       "-" + std::string(info ? info->name() : "x")))
                .string();
    // sun_path holds 107 characters; test names can be long.
    if (path_.size() > 100) path_.resize(100);
    std::filesystem::remove(path_);
  }
  ~TempSocketPath() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempSocketPath(const TempSocketPath&) = delete;
  TempSocketPath& operator=(const TempSocketPath&) = delete;
  [[nodiscard]] const std::string& str() const { return path_; }

 private:
  std::string path_;
};

}  // namespace meshnode::nodeapi::testing
