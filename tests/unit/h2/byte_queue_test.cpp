#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "h2/byte_queue.hpp"

namespace meshnode::h2 {
namespace {

std::vector<std::byte> seq(std::size_t n, std::size_t start = 0) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((start + i) * 7);
  return v;
}

TEST(ByteQueue, FifoAcrossAppendsReadsAndCompaction) {
  ByteQueue q;
  std::vector<std::byte> expected;
  std::vector<std::byte> got;
  std::size_t produced = 0;
  // Interleave appends and partial reads so head_ moves and compaction runs many times.
  for (int round = 0; round < 200; ++round) {
    auto chunk = seq(1000 + round * 13, produced);
    produced += chunk.size();
    expected.insert(expected.end(), chunk.begin(), chunk.end());
    q.append(chunk);
    std::vector<std::byte> out(700 + round * 11);
    std::size_t n = q.read(out);
    got.insert(got.end(), out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n));
    ASSERT_EQ(q.size(), expected.size() - got.size());
  }
  std::vector<std::byte> rest(q.size());
  EXPECT_EQ(q.read(rest), rest.size());
  got.insert(got.end(), rest.begin(), rest.end());
  EXPECT_TRUE(q.empty());
  EXPECT_TRUE(got == expected);
}

TEST(ByteQueue, FrontAndConsume) {
  ByteQueue q;
  auto data = seq(100);
  q.append(data);
  ASSERT_EQ(q.front().size(), 100u);
  EXPECT_TRUE(std::equal(q.front().begin(), q.front().end(), data.begin()));
  q.consume(40);
  ASSERT_EQ(q.front().size(), 60u);
  EXPECT_EQ(q.front()[0], data[40]);
  q.consume(60);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.front().size(), 0u);
}

// Bytes of `q` taken with take_blocks, in the order the parts came (the parts' blocks freed after).
std::vector<std::byte> take_all(ByteQueue& q, std::size_t& parts_seen) {
  std::vector<std::byte> got;
  net::OwnedBytes out;
  const std::size_t n = q.take_blocks(out);
  for (const auto part : out.parts()) got.insert(got.end(), part.begin(), part.end());
  EXPECT_EQ(n, got.size());
  EXPECT_EQ(n, out.size());
  parts_seen = out.parts().size();
  return got;
}

TEST(ByteQueue, TakeBlocksHandsOverTheHeadInOrderAndLaterAppendsContinue) {
  ByteQueue q;
  q.append(seq(100));
  std::vector<std::byte> sink(40);
  ASSERT_EQ(q.read(sink), 40u);  // the head block now starts mid-block
  q.append(seq(40'000, 100));
  std::size_t parts = 0;
  auto got = take_all(q, parts);
  EXPECT_EQ(parts, 3u) << "60 + 40,000 bytes fill 16 KiB blocks: 16,384, 16,384, 7,232 bytes";
  EXPECT_TRUE(got == seq(40'060, 40)) << "bytes out of order or damaged";
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
  // The partly filled last block left with the rest: an append starts a fresh one.
  q.append(seq(10, 7));
  EXPECT_EQ(q.size(), 10u);
  EXPECT_TRUE(take_all(q, parts) == seq(10, 7));
}

TEST(ByteQueue, TakeBlocksStopsWhenTheOwnedBytesAreFull) {
  ByteQueue q;
  const std::size_t total = (net::OwnedBytes::kMaxParts + 2) * ByteQueue::kBlockSize + 5;
  q.append(seq(total));
  std::size_t parts = 0;
  auto first = take_all(q, parts);
  EXPECT_EQ(parts, net::OwnedBytes::kMaxParts);
  EXPECT_EQ(first.size(), net::OwnedBytes::kMaxParts * ByteQueue::kBlockSize);
  EXPECT_EQ(q.size(), total - first.size());
  auto second = take_all(q, parts);
  EXPECT_EQ(parts, 3u);
  first.insert(first.end(), second.begin(), second.end());
  EXPECT_TRUE(first == seq(total));
  EXPECT_TRUE(q.empty());
}

TEST(ByteQueue, ReadFromEmptyReturnsZero) {
  ByteQueue q;
  std::vector<std::byte> out(10);
  EXPECT_EQ(q.read(out), 0u);
  q.append(seq(3));
  EXPECT_EQ(q.read(out), 3u);
  EXPECT_EQ(q.read(out), 0u);
}

}  // namespace
}  // namespace meshnode::h2
