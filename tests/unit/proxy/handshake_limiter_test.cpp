// HandshakeLimiter (issue 11 defect 9): bounds per source and per listener, and on a full listener
// the oldest handshake gives way once it is old enough, so sources that stall handshakes cannot
// keep a listener locked until the handshake deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <vector>

#include "proxy/handshake_limiter.hpp"

namespace meshnode::proxy {
namespace {

using namespace std::chrono_literals;
using Clock = HandshakeLimiter::Clock;

base::IpAddr ip(std::uint8_t last) { return *base::IpAddr::parse("10.0.0." + std::to_string(last)); }

TEST(HandshakeLimiter, BoundsPerSourceThenPerListener) {
  HandshakeLimiter limiter(4, 2, 1s);
  const auto t0 = Clock::now();
  std::vector<HandshakeLimiter::Permit> held;
  for (int i = 0; i < 2; ++i) held.push_back(*limiter.try_acquire(ip(1), [] {}, t0));
  auto third = limiter.try_acquire(ip(1), [] {}, t0);
  ASSERT_FALSE(third);
  EXPECT_EQ(third.error().context, "too many concurrent TLS handshakes from 10.0.0.1 (2)");
  for (std::uint8_t host : {2, 3}) held.push_back(*limiter.try_acquire(ip(host), [] {}, t0));
  auto full = limiter.try_acquire(ip(4), [] {}, t0 + 999ms);  // the oldest is not old enough yet
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().context, "too many concurrent TLS handshakes on this listener (4)");
  EXPECT_EQ(limiter.in_flight(), 4u);
  held.pop_back();  // a handshake ends: its slot is free
  EXPECT_TRUE(limiter.try_acquire(ip(4), [] {}, t0));
  EXPECT_EQ(limiter.evictions(), 0u);
}

TEST(HandshakeLimiter, AFullListenerEvictsTheOldestHandshakeOnceItIsOldEnough) {
  HandshakeLimiter limiter(3, 3, 1s);
  const auto t0 = Clock::now();
  std::vector<int> aborted;
  std::vector<std::optional<HandshakeLimiter::Permit>> held;
  for (int i = 0; i < 3; ++i) {
    held.emplace_back(*limiter.try_acquire(ip(9), [&aborted, i] { aborted.push_back(i); }, t0 + i * 100ms));
  }
  auto newcomer = limiter.try_acquire(ip(1), [] {}, t0 + 1s);
  ASSERT_TRUE(newcomer) << newcomer.error().context;
  EXPECT_EQ(aborted, std::vector<int>{0}) << "the oldest handshake gives way, and only it";
  EXPECT_TRUE(held[0]->evicted());
  EXPECT_FALSE(held[1]->evicted());
  EXPECT_FALSE(newcomer->evicted());
  EXPECT_EQ(limiter.in_flight(), 3u);
  EXPECT_EQ(limiter.evictions(), 1u);
  // The evicted permit going later does not free a second slot.
  held[0].reset();
  EXPECT_EQ(limiter.in_flight(), 3u);
  // The next one evicts the next oldest (started at +100 ms), and the one after it (+200 ms).
  auto second = limiter.try_acquire(ip(2), [] {}, t0 + 1100ms);
  ASSERT_TRUE(second);
  EXPECT_EQ(aborted, (std::vector<int>{0, 1}));
  auto too_young = limiter.try_acquire(ip(3), [] {}, t0 + 1150ms);
  EXPECT_FALSE(too_young) << "the oldest left (+200 ms) is only 950 ms old";
  EXPECT_TRUE(limiter.try_acquire(ip(3), [] {}, t0 + 1200ms));
  EXPECT_EQ(aborted, (std::vector<int>{0, 1, 2}));
}

TEST(HandshakeLimiter, ASourceAtItsBoundEvictsNothing) {
  HandshakeLimiter limiter(2, 1, 1s);
  const auto t0 = Clock::now();
  bool aborted = false;
  auto a = limiter.try_acquire(ip(1), [&] { aborted = true; }, t0);
  auto b = limiter.try_acquire(ip(2), [] {}, t0);
  ASSERT_TRUE(a && b);
  EXPECT_FALSE(limiter.try_acquire(ip(2), [] {}, t0 + 5s));
  EXPECT_FALSE(aborted);
}

}  // namespace
}  // namespace meshnode::proxy
