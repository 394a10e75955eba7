#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "net/owned_bytes.hpp"

namespace meshnode::h2 {

/// A FIFO of bytes kept in fixed 16 KiB blocks: appending and consuming never move queued
/// bytes (a contiguous buffer would memmove megabytes per read at a 4 MiB stream window), memory
/// grows with the queued amount and is released as it drains, so idle streams hold nothing.
/// `front()` is the contiguous run at the head (at most one block). Not thread-safe.
class ByteQueue {
 public:
  static constexpr std::size_t kBlockSize = 16 * 1024;

  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }

  /// The contiguous bytes at the head: 0..kBlockSize of them, all of them when size() ≤ that.
  [[nodiscard]] std::span<const std::byte> front() const noexcept {
    if (blocks_.empty()) return {};
    const Block& b = blocks_.front();
    return {b.data.get() + b.begin, b.end - b.begin};
  }

  void append(std::span<const std::byte> data) {
    while (!data.empty()) {
      if (blocks_.empty() || blocks_.back().end == kBlockSize) {
        blocks_.push_back(Block{std::make_unique_for_overwrite<std::byte[]>(kBlockSize), 0, 0});
      }
      Block& b = blocks_.back();
      std::size_t n = std::min(kBlockSize - b.end, data.size());
      std::memcpy(b.data.get() + b.end, data.data(), n);
      b.end += n;
      size_ += n;
      data = data.subspan(n);
    }
  }

  /// Copies up to out.size() bytes out and consumes them; returns the count.
  std::size_t read(std::span<std::byte> out) noexcept {
    std::size_t total = 0;
    while (total < out.size() && !empty()) {
      auto head = front();
      std::size_t n = std::min(head.size(), out.size() - total);
      std::memcpy(out.data() + total, head.data(), n);
      consume(n);
      total += n;
    }
    return total;
  }

  /// Drops `n` bytes from the head (n ≤ size()).
  void consume(std::size_t n) noexcept {
    size_ -= n;
    while (n > 0) {
      Block& b = blocks_.front();
      std::size_t k = std::min(n, b.end - b.begin);
      b.begin += k;
      n -= k;
      if (b.begin == b.end) blocks_.erase(blocks_.begin());
    }
    if (blocks_.empty()) std::vector<Block>().swap(blocks_);
  }

  /// Moves whole blocks from the head into `out` (no copy) until it is full or this is empty;
  /// the last one may be partly filled, and later appends start a new block. Returns the bytes
  /// moved.
  std::size_t take_blocks(net::OwnedBytes& out) noexcept {
    std::size_t taken = 0;
    std::size_t k = 0;
    for (; k < blocks_.size() && !out.full(); ++k) {
      Block& b = blocks_[k];
      const std::span<const std::byte> bytes(b.data.get() + b.begin, b.end - b.begin);
      taken += bytes.size();
      out.push(std::move(b.data), bytes);
    }
    blocks_.erase(blocks_.begin(), blocks_.begin() + static_cast<std::ptrdiff_t>(k));
    size_ -= taken;
    if (blocks_.empty()) std::vector<Block>().swap(blocks_);
    return taken;
  }

  void clear() noexcept {
    std::vector<Block>().swap(blocks_);
    size_ = 0;
  }

 private:
  struct Block {
    std::unique_ptr<std::byte[]> data;
    std::size_t begin = 0;
    std::size_t end = 0;
  };
  std::vector<Block> blocks_;
  std::size_t size_ = 0;
};

}  // namespace meshnode::h2
