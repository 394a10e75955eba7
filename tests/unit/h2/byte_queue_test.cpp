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
