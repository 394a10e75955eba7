// The inbound HBONE server against a peer that holds a valid mesh certificate and breaks HTTP/2
// on purpose (issue 11 defects 1 and 8): oversized and HPACK-bomb header lists, rapid resets,
// resets the server is made to send. Each case also checks a legitimate tunnel on another
// connection still works.

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>

#include "telemetry/metrics.hpp"
#include "unit/h2/raw_h2.hpp"

namespace meshnode::hbone {
namespace {

using namespace meshnode::testing;
using namespace std::chrono_literals;

constexpr std::uint32_t kEnhanceYourCalm = 0xb;

/// Resident set size of this process (bytes), from /proc/self/status VmRSS.
std::size_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

/// The request fields the loopback's stream handler wants (x-mode sink), as HPACK literals.
std::string sink_fields(std::string_view tag = "abuse") {
  return raw::literal("x-mode", "sink") + raw::literal("x-tag", tag) + raw::literal("x-size", "0") +
         raw::literal("x-seed", "0");
}

asio::awaitable<bool> echo_ok(HboneLoopback& lo, std::string tag) {
  auto stream = co_await lo.connect("echo", tag);
  if (!stream) {
    ADD_FAILURE() << stream.error().message();
    co_return false;
  }
  auto data = random_bytes(9, 100'000);
  auto [got, sent] = co_await read_and_write(**stream, data);
  co_return sent && got && *got == data;
}

// Defect 1: 10 streams whose blocks reference one ~4 KB dynamic-table entry 20,000 times each
// (~20 KB on the wire, ~80 MB decoded per stream). Before: the fields were all kept (RSS +800 MB)
// and the streams served. Now: each stream is reset as soon as its list passes the limit,
// nothing is kept, and the connection lives on.
asio::awaitable<void> hpack_bomb(HboneLoopback& lo, telemetry::Counter& too_large) {
  CO_ASSERT(co_await echo_ok(lo, "before"));
  const std::size_t rss_before = rss_bytes();
  raw::RawClient attacker(lo);
  CO_ASSERT(co_await attacker.connect());
  std::string bytes = raw::preface();
  constexpr int kStreams = 10;
  constexpr int kReferences = 20'000;
  for (int i = 0; i < kStreams; ++i) {
    std::string block = raw::connect_block("127.0.0.1:8080", sink_fields());
    block += raw::literal("x-big", std::string(4000, 'a'), /*index=*/true);
    for (int r = 0; r < kReferences; ++r) block += raw::indexed(62);
    bytes += raw::headers(static_cast<std::uint32_t>(2 * i + 1), block, raw::kEndStream);
  }
  CO_ASSERT(co_await attacker.send(std::move(bytes)));
  const std::function<bool(const raw::Seen&)> all_answered = [](const raw::Seen& s) {
    return s.resets.size() + s.status.size() >= static_cast<std::size_t>(kStreams);
  };
  CO_ASSERT(co_await attacker.read_until(all_answered, 10s), attacker.seen.resets.size() << " streams reset");
  EXPECT_TRUE(attacker.seen.status.empty()) << attacker.seen.status.size() << " oversized streams got a response";
  EXPECT_EQ(attacker.seen.resets.size(), static_cast<std::size_t>(kStreams));
  EXPECT_EQ(lo.streams_served, 1) << "a stream with an oversized header list reached the handler";
  EXPECT_EQ(too_large.value(), static_cast<std::uint64_t>(kStreams));
  const std::size_t rss_after = rss_bytes();
  EXPECT_LT(rss_after, rss_before + (16u << 20)) << "RSS grew from " << rss_before << " to " << rss_after;
  EXPECT_FALSE(attacker.seen.goaway_code.has_value());
  EXPECT_TRUE(co_await echo_ok(lo, "after"));
}

TEST(HboneAbuse, HpackBombStreamsAreResetAndKeepNothing) {
  HboneLoopback lo;
  telemetry::Counter too_large;
  lo.server_settings.counters.header_list_too_large = &too_large;
  lo.run(hpack_bomb(lo, too_large), 30s);
}

// Defect 1: one plain header list of ~100 KiB (over the advertised 64 KiB) is refused too.
asio::awaitable<void> huge_headers(HboneLoopback& lo) {
  raw::RawClient attacker(lo);
  CO_ASSERT(co_await attacker.connect());
  std::string block = raw::connect_block("127.0.0.1:8080", sink_fields());
  for (int i = 0; i < 25; ++i) block += raw::literal("x-h" + std::to_string(i), std::string(4000, 'b'));
  CO_ASSERT(co_await attacker.send(raw::preface() + raw::headers(1, block, raw::kEndStream)));
  const std::function<bool(const raw::Seen&)> answered = [](const raw::Seen& s) {
    return s.status.contains(1) || s.resets.contains(1);
  };
  CO_ASSERT(co_await attacker.read_until(answered, 5s));
  EXPECT_FALSE(attacker.seen.status.contains(1)) << "answered " << attacker.seen.status[1];
  EXPECT_TRUE(attacker.seen.resets.contains(1));
  EXPECT_EQ(lo.streams_served, 0);
  EXPECT_TRUE(co_await echo_ok(lo, "after"));
}

TEST(HboneAbuse, HeaderListOverTheAdvertisedLimitIsReset) {
  HboneLoopback lo;
  lo.run(huge_headers(lo));
}

/// `count` streams, each opened (HEADERS) and at once broken by `breaker(stream id)`.
std::string open_and_break(int count, const std::function<std::string(std::uint32_t)>& breaker) {
  std::string bytes;
  const std::string block = raw::connect_block("127.0.0.1:8080", sink_fields());
  for (int i = 0; i < count; ++i) {
    const auto id = static_cast<std::uint32_t>(2 * i + 1);
    bytes += raw::headers(id, block) + breaker(id);
  }
  return bytes;
}

/// Sends the preface and `bytes` while reading what comes back until `done` (the write may fail
/// once the server gave up on the connection); returns whether `done` held.
asio::awaitable<bool> attack(raw::RawClient& attacker, std::string bytes, std::function<bool(const raw::Seen&)> done) {
  using namespace asio::experimental::awaitable_operators;
  auto reader = attacker.read_until(std::move(done), 10s);
  auto writer = attacker.send(raw::preface() + std::move(bytes));
  auto both = std::move(reader) && std::move(writer);
  auto [held, sent] = co_await std::move(both);
  co_return held;
}

/// attack() until GOAWAY; true if it was GOAWAY(ENHANCE_YOUR_CALM).
asio::awaitable<bool> attack_until_calm(raw::RawClient& attacker, std::string bytes) {
  const std::function<bool(const raw::Seen&)> goaway = [](const raw::Seen& s) { return s.goaway_code.has_value(); };
  auto held = co_await attack(attacker, std::move(bytes), goaway);
  co_return held && attacker.seen.goaway_code == kEnhanceYourCalm;
}

// Defect 8: 10,000 streams each reset by the client right after its HEADERS (CVE-2023-44487).
// Before: streams were served (app dials) until nghttp2's own limit, ~1,900 of them. Now none is
// served (each was closed before its handler could run) and the connection's budget ends it.
asio::awaitable<void> rapid_reset(HboneLoopback& lo) {
  raw::RawClient attacker(lo);
  CO_ASSERT(co_await attacker.connect());
  const std::function<std::string(std::uint32_t)> cancel = [](std::uint32_t id) {
    return raw::rst_stream(id, NGHTTP2_CANCEL);
  };
  auto bytes = open_and_break(10'000, cancel);
  EXPECT_TRUE(co_await attack_until_calm(attacker, std::move(bytes)))
      << "no GOAWAY(ENHANCE_YOUR_CALM); goaway code " << attacker.seen.goaway_code.value_or(0);
  const h2::Settings defaults;
  EXPECT_LE(lo.streams_served, static_cast<int>(defaults.reset_burst));
  EXPECT_LE(attacker.seen.goaway_last_stream, 2 * (defaults.reset_burst + 50) + 1);
  EXPECT_TRUE(co_await echo_ok(lo, "legit"));
}

TEST(HboneAbuse, RapidResetEndsWithEnhanceYourCalm) {
  HboneLoopback lo;
  lo.run(rapid_reset(lo), 30s);
}

// Defect 8, server-caused: trailers without END_STREAM make nghttp2 reset each stream
// ("MadeYouReset"). Before: 10,000 streams served, no GOAWAY.
asio::awaitable<void> made_you_reset(HboneLoopback& lo) {
  raw::RawClient attacker(lo);
  CO_ASSERT(co_await attacker.connect());
  const std::function<std::string(std::uint32_t)> bad_trailers = [](std::uint32_t id) {
    return raw::headers(id, raw::literal("x-trailer", "1"));  // trailers must carry END_STREAM
  };
  auto bytes = open_and_break(10'000, bad_trailers);
  EXPECT_TRUE(co_await attack_until_calm(attacker, std::move(bytes)))
      << "no GOAWAY(ENHANCE_YOUR_CALM); goaway code " << attacker.seen.goaway_code.value_or(0);
  const h2::Settings defaults;
  EXPECT_LE(lo.streams_served, static_cast<int>(defaults.reset_burst));
  EXPECT_TRUE(co_await echo_ok(lo, "legit"));
}

TEST(HboneAbuse, ServerCausedResetsCountTowardsTheBudget) {
  HboneLoopback lo;
  lo.run(made_you_reset(lo), 30s);
}

// Defect 8, per identity: 10 connections × 1,000 resets, each within its connection's budget
// (raised here), together over the identity's (1,000). Before: no GOAWAY at all. Now the identity
// runs out, the later connections are ended, and a new connection waits before it is served.
asio::awaitable<void> resets_across_connections(HboneLoopback& lo) {
  int calmed = 0;
  const std::function<std::string(std::uint32_t)> cancel = [](std::uint32_t id) {
    return raw::rst_stream(id, NGHTTP2_CANCEL);
  };
  for (int c = 0; c < 10; ++c) {
    raw::RawClient attacker(lo);
    CO_ASSERT(co_await attacker.connect());
    // A PING after the resets: its ACK says the server processed them all (no GOAWAY then).
    auto bytes = open_and_break(1000, cancel) + raw::ping();
    const std::function<bool(const raw::Seen&)> done = [](const raw::Seen& s) {
      if (s.goaway_code) return true;
      return std::any_of(s.frames.begin(), s.frames.end(),
                         [](const raw::Frame& f) { return f.type == raw::kPing && (f.flags & raw::kAck) != 0; });
    };
    CO_ASSERT(co_await attack(attacker, std::move(bytes), done));
    if (attacker.seen.goaway_code == kEnhanceYourCalm) ++calmed;
  }
  EXPECT_GE(calmed, 8) << "connections ended for the identity's resets";
  EXPECT_LE(lo.streams_served, 1000);

  // A new connection from the same identity is served only after a delay.
  raw::RawClient late(lo);
  CO_ASSERT(co_await late.connect());
  const auto start = std::chrono::steady_clock::now();
  const std::function<bool(const raw::Seen&)> settings = [](const raw::Seen& s) { return !s.frames.empty(); };
  CO_ASSERT(co_await late.send(raw::preface()));
  CO_ASSERT(co_await late.read_until(settings, 5s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms) << "a peer over its reset budget was served at once";
}

TEST(HboneAbuse, ResetBudgetPerIdentitySpansConnections) {
  HboneLoopback lo;
  lo.server_settings.reset_burst = 5000;
  lo.budgets = std::make_shared<PeerResetBudgets>(PeerResetBudgets::Limits{1000, 100, 300ms, 10s});
  lo.run(resets_across_connections(lo), 60s);
}

}  // namespace
}  // namespace meshnode::hbone
