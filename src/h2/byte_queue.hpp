#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

namespace meshnode::h2 {

/// A FIFO of bytes in one contiguous buffer that grows with traffic and gives its memory back
/// when drained (idle connections must stay small). Not thread-safe.
class ByteQueue {
 public:
  /// Capacity kept when the queue drains empty; larger buffers are released.
  static constexpr std::size_t kKeepWhenEmpty = 16 * 1024;

  [[nodiscard]] std::size_t size() const noexcept { return buf_.size() - head_; }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] std::span<const std::byte> front() const noexcept { return {buf_.data() + head_, size()}; }

  void append(std::span<const std::byte> data) {
    if (head_ > 0 && head_ >= buf_.size() / 2) compact();
    buf_.insert(buf_.end(), data.begin(), data.end());
  }

  /// Copies up to out.size() bytes out and consumes them; returns the count.
  std::size_t read(std::span<std::byte> out) noexcept {
    std::size_t n = std::min(out.size(), size());
    // memcpy with a null pointer is undefined even for 0 bytes (an empty queue has no buffer).
    if (n == 0) return 0;
    std::memcpy(out.data(), buf_.data() + head_, n);
    consume(n);
    return n;
  }

  void consume(std::size_t n) noexcept {
    head_ += n;
    if (head_ == buf_.size()) clear();
  }

  void clear() noexcept {
    head_ = 0;
    buf_.clear();
    if (buf_.capacity() > kKeepWhenEmpty) std::vector<std::byte>().swap(buf_);
  }

 private:
  void compact() {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }

  std::vector<std::byte> buf_;
  std::size_t head_ = 0;
};

}  // namespace meshnode::h2
