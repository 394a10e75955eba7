#pragma once

// No Asio here: h2::ByteQueue (built into the HTTP/2 fuzz target, which has no Asio) fills it.

#include <array>
#include <cstddef>
#include <memory>
#include <span>

namespace meshnode::net {

/// Received bytes handed over in the heap blocks that already hold them, so a reader can write
/// them on without copying them into a buffer of its own (ByteStream::take_input). At most
/// kMaxParts runs, in stream order; each owns its block, freed by clear() or the destructor once
/// the bytes are written. 400 bytes: keep it in a short-lived frame, not a connection's.
class OwnedBytes {
 public:
  static constexpr std::size_t kMaxParts = 16;

  [[nodiscard]] bool full() const noexcept { return count_ == kMaxParts; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  /// Total bytes in all parts.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// The runs in stream order (each non-empty).
  [[nodiscard]] std::span<const std::span<const std::byte>> parts() const noexcept {
    return std::span(parts_).first(count_);
  }

  /// Adds `bytes`, which lie inside `block`, as the next run (the caller checked !full()).
  void push(std::unique_ptr<std::byte[]> block, std::span<const std::byte> bytes) noexcept {
    blocks_[count_] = std::move(block);
    parts_[count_] = bytes;
    ++count_;
    size_ += bytes.size();
  }

  /// Frees every block.
  void clear() noexcept {
    for (std::size_t i = 0; i < count_; ++i) {
      blocks_[i].reset();
      parts_[i] = {};
    }
    count_ = 0;
    size_ = 0;
  }

 private:
  std::array<std::unique_ptr<std::byte[]>, kMaxParts> blocks_;
  std::array<std::span<const std::byte>, kMaxParts> parts_;
  std::size_t count_ = 0;
  std::size_t size_ = 0;
};

}  // namespace meshnode::net
