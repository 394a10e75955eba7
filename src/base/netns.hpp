#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "base/error.hpp"
#include "base/unique_fd.hpp"

namespace meshnode::base {

/// A network namespace held open by an fd (from a path like /var/run/netns/<name>, or received over
/// ZDS). Equality is by (st_dev, st_ino) of the namespace inode, which identifies it across fds.
class Netns {
 public:
  /// Opens the namespace at `path` (O_RDONLY|O_CLOEXEC). Errc::kIo naming the path when it cannot
  /// be opened or is not a network namespace.
  [[nodiscard]] static Result<Netns> open(const std::string& path);

  /// Takes ownership of `fd`, which must refer to a network namespace (checked with fstat only).
  [[nodiscard]] static Result<Netns> from_fd(UniqueFd fd, std::string description);

  /// The network namespace the calling thread is in now.
  [[nodiscard]] static Result<Netns> current();

  /// Runs `fn` with the calling thread switched into this namespace, then switches back.
  /// Synchronous on purpose: sockets created inside stay bound to the namespace; never suspend
  /// inside `fn`. Errc::kIo if entering fails (then `fn` is not run). The namespace is restored
  /// on every exit, also when `fn` throws (the exception then propagates). Failing to restore the
  /// original namespace aborts the process: the thread would be poisoned for every later task.
  [[nodiscard]] Result<void> run_in(const std::function<void()>& fn) const;

  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  [[nodiscard]] const std::string& description() const noexcept { return description_; }
  [[nodiscard]] dev_t dev() const noexcept { return dev_; }
  [[nodiscard]] ino_t ino() const noexcept { return ino_; }

  friend bool operator==(const Netns& a, const Netns& b) noexcept {
    return a.dev_ == b.dev_ && a.ino_ == b.ino_;
  }

 private:
  Netns(UniqueFd fd, std::string description, dev_t dev, ino_t ino)
      : fd_(std::move(fd)), description_(std::move(description)), dev_(dev), ino_(ino) {}

  UniqueFd fd_;
  std::string description_;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
};

}  // namespace meshnode::base
