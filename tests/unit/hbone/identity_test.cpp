// acquire_identity: the data path's wait for a certificate (fast path, an answer from another
// thread, an error, no answer before the deadline, a late answer after giving up).
#include "hbone/identity.hpp"

#include <gtest/gtest.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>

#include <optional>
#include <thread>

namespace meshnode::hbone {
namespace {

using Tls = tls::IdentitySource::Tls;

/// Answers fetch() from its own thread after `delay` with `answer` (or never, when unset).
class SlowSource final : public tls::IdentitySource {
 public:
  std::optional<base::Result<Tls>> now = base::fail(base::Errc::kCertificate, "no certificate yet");
  std::optional<base::Result<Tls>> answer;
  std::chrono::milliseconds delay{50};
  int fetches = 0;

  ~SlowSource() override {
    for (auto& t : threads_) t.join();
  }
  base::Result<Tls> current(const base::SpiffeId&) override { return *now; }
  void fetch(const base::SpiffeId&, Done done) override {
    ++fetches;
    if (!answer) {
      pending_ = std::move(done);  // never answered (until the source goes away)
      return;
    }
    threads_.emplace_back([this, done = std::move(done)] {
      std::this_thread::sleep_for(delay);
      done(*answer);
    });
  }

 private:
  std::vector<std::thread> threads_;
  Done pending_;
};

base::SpiffeId id() { return {"cluster.local", "default", "client"}; }

Tls some_tls() {
  auto t = std::make_shared<tls::IdentityTls>();
  t->identity = id();
  t->serial_hex = "abc";
  return t;
}

base::Result<Tls> run(SlowSource& source, std::chrono::milliseconds timeout) {
  asio::io_context io;
  std::optional<base::Result<Tls>> got;
  asio::co_spawn(
      io, [&]() -> asio::awaitable<void> { got = co_await acquire_identity(source, id(), timeout); }, asio::detached);
  io.run();
  return *got;
}

TEST(AcquireIdentityTest, ValidCertificateIsReturnedWithoutFetching) {
  SlowSource source;
  source.now = some_tls();
  auto got = run(source, std::chrono::seconds(1));
  ASSERT_TRUE(got);
  EXPECT_EQ((*got)->serial_hex, "abc");
  EXPECT_EQ(source.fetches, 0);
}

TEST(AcquireIdentityTest, WaitsForTheAnswerFromAnotherThread) {
  SlowSource source;
  source.answer = some_tls();
  auto got = run(source, std::chrono::seconds(5));
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ((*got)->serial_hex, "abc");
  EXPECT_EQ(source.fetches, 1);
}

TEST(AcquireIdentityTest, FailsClosedWithTheSourcesReason) {
  SlowSource source;
  source.answer = base::fail(base::Errc::kCertificate,
                             "certificate for spiffe://cluster.local/ns/default/sa/client expired at 2026-01-01T00:00:00Z");
  auto got = run(source, std::chrono::seconds(5));
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, base::Errc::kCertificate);
  EXPECT_NE(got.error().message().find("expired at"), std::string::npos) << got.error().message();
}

TEST(AcquireIdentityTest, NoAnswerBeforeTheDeadlineFailsNamingTheIdentity) {
  SlowSource source;  // never answers
  auto t0 = std::chrono::steady_clock::now();
  auto got = run(source, std::chrono::milliseconds(100));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().message(),
            "certificate: no certificate for spiffe://cluster.local/ns/default/sa/client within 100 ms");
}

TEST(AcquireIdentityTest, CallbackHeldPastTheIoContextIsHarmless) {
  // A source that still holds the reply when the worker's io_context is gone (shutdown with a
  // request pending) destroys it later without touching the dead context.
  auto source = std::make_unique<SlowSource>();
  auto got = run(*source, std::chrono::milliseconds(20));
  EXPECT_FALSE(got);
  source.reset();
}

TEST(AcquireIdentityTest, LateAnswerAfterTheDeadlineIsDropped) {
  SlowSource source;
  source.answer = some_tls();
  source.delay = std::chrono::milliseconds(300);
  auto got = run(source, std::chrono::milliseconds(50));  // the io_context is gone when the answer comes
  EXPECT_FALSE(got);
}

}  // namespace
}  // namespace meshnode::hbone
