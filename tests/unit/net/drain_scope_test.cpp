#include "net/drain_scope.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>

#include "net/awaitable.hpp"
#include "net/byte_stream.hpp"
#include "telemetry/metrics.hpp"

namespace meshnode::net {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Sleeps `d` unless cancelled; records how it ended.
asio::awaitable<void> sleeper(Clock::duration d, std::atomic<int>* finished, std::atomic<int>* aborted) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  auto [ec] = co_await timer.async_wait(kNoThrow);
  if (ec == asio::error::operation_aborted) aborted->fetch_add(1);
  finished->fetch_add(1);
}

asio::awaitable<void> thrower() {
  asio::steady_timer timer(co_await asio::this_coro::executor, 1ms);
  co_await timer.async_wait(kNoThrow);
  throw std::runtime_error("boom in a connection");
}

// Waits on `scope` until `deadline`; stores the verdict.
asio::awaitable<void> waiter(DrainScope& scope, Clock::time_point deadline, std::optional<bool>* verdict,
                             Clock::time_point* at) {
  const bool idle = co_await scope.wait_idle(deadline);
  *verdict = idle;
  *at = Clock::now();
}

// Runs `io` until `done()` or 10 s.
template <class Done>
void run_until(asio::io_context& io, Done done) {
  const auto until = Clock::now() + 10s;
  while (!done() && Clock::now() < until) {
    io.restart();
    io.run_one_for(20ms);
  }
}

TEST(DrainScope, WaitIdleReturnsWhenTheLastTaskEndsNotAtTheDeadline) {
  asio::io_context io;
  DrainScope scope("test");
  std::atomic<int> finished{0};
  std::atomic<int> aborted{0};
  for (auto d : {10ms, 30ms, 60ms}) scope.spawn(io.get_executor(), sleeper(d, &finished, &aborted), "sleeper");
  EXPECT_EQ(scope.active(), 3u);
  std::optional<bool> verdict;
  Clock::time_point at;
  const auto start = Clock::now();
  asio::co_spawn(io, waiter(scope, start + 10s, &verdict, &at), asio::detached);
  run_until(io, [&] { return verdict.has_value(); });
  ASSERT_TRUE(verdict.has_value());
  EXPECT_TRUE(*verdict);
  EXPECT_EQ(finished.load(), 3);
  EXPECT_EQ(aborted.load(), 0);
  EXPECT_EQ(scope.active(), 0u);
  EXPECT_LT(at - start, 5s) << "woken by the deadline instead of the last task";
}

TEST(DrainScope, DeadlinePassesThenCancelEndsTheRestThroughTheirSlots) {
  asio::io_context io;
  DrainScope scope("test");
  std::atomic<int> finished{0};
  std::atomic<int> aborted{0};
  scope.spawn(io.get_executor(), sleeper(1h, &finished, &aborted), "stuck-1");
  scope.spawn(io.get_executor(), sleeper(1h, &finished, &aborted), "stuck-2");
  std::optional<bool> verdict;
  Clock::time_point at;
  const auto deadline = Clock::now() + 100ms;
  asio::co_spawn(io, waiter(scope, deadline, &verdict, &at), asio::detached);
  run_until(io, [&] { return verdict.has_value(); });
  ASSERT_TRUE(verdict.has_value());
  EXPECT_FALSE(*verdict);
  EXPECT_GE(at, deadline);
  EXPECT_EQ(scope.active(), 2u);

  scope.cancel();
  verdict.reset();
  asio::co_spawn(io, waiter(scope, Clock::now() + 10s, &verdict, &at), asio::detached);
  run_until(io, [&] { return verdict.has_value(); });
  ASSERT_TRUE(verdict.has_value());
  EXPECT_TRUE(*verdict);
  EXPECT_EQ(aborted.load(), 2) << "cancel() must abort the awaited operation, not throw";
  EXPECT_EQ(scope.failures(), 0u);
}

TEST(DrainScope, AnEscapingExceptionIsLoggedWithTheTaskIdAndCounted) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("drain-test", sink));

  asio::io_context io;
  telemetry::MetricsRegistry registry;
  telemetry::Counter& metric = registry.counter("meshnode_task_failures_total", "t", {{"scope", "test"}});
  DrainScope scope("test", &metric);
  std::atomic<int> finished{0};
  std::atomic<int> aborted{0};
  scope.spawn(io.get_executor(), thrower(), "conn-42");
  scope.spawn(io.get_executor(), sleeper(20ms, &finished, &aborted), "bystander");
  run_until(io, [&] { return scope.active() == 0; });
  spdlog::set_default_logger(previous);

  EXPECT_EQ(scope.active(), 0u);
  EXPECT_EQ(scope.failures(), 1u);
  EXPECT_EQ(metric.value(), 1u);
  EXPECT_EQ(finished.load(), 1) << "another task's exception must not end this one";
  bool logged = false;
  for (const auto& line : sink->last_formatted()) {
    logged = logged || (line.find("id=conn-42") != std::string::npos && line.find("boom") != std::string::npos);
  }
  EXPECT_TRUE(logged) << "the failure must name the task id";
}

TEST(DrainScope, TasksOnWorkerThreadsWakeAWaiterOnAnotherThread) {
  asio::io_context control;
  asio::io_context worker_a;
  asio::io_context worker_b;
  auto guard_a = asio::make_work_guard(worker_a);
  auto guard_b = asio::make_work_guard(worker_b);
  std::thread ta([&] { worker_a.run(); });
  std::thread tb([&] { worker_b.run(); });
  DrainScope scope("test");
  std::atomic<int> finished{0};
  std::atomic<int> aborted{0};
  for (int i = 0; i < 50; ++i) {
    scope.spawn((i % 2 == 0 ? worker_a : worker_b).get_executor(), sleeper(std::chrono::milliseconds(i), &finished, &aborted),
                "t" + std::to_string(i));
  }
  std::optional<bool> verdict;
  Clock::time_point at;
  const auto start = Clock::now();
  asio::co_spawn(control, waiter(scope, start + 10s, &verdict, &at), asio::detached);
  run_until(control, [&] { return verdict.has_value(); });
  guard_a.reset();
  guard_b.reset();
  ta.join();
  tb.join();
  ASSERT_TRUE(verdict.has_value());
  EXPECT_TRUE(*verdict);
  EXPECT_EQ(finished.load(), 50);
  EXPECT_LT(at - start, 5s);
}

TEST(DrainScope, OwnerLivesUntilItsTaskEndsAndTheScopeMayGoFirst) {
  asio::io_context io;
  auto owner = std::make_shared<int>(7);
  std::weak_ptr<int> weak = owner;
  std::atomic<int> finished{0};
  std::atomic<int> aborted{0};
  {
    DrainScope scope("short-lived");
    scope.spawn(io.get_executor(), sleeper(20ms, &finished, &aborted), "owned", std::move(owner));
  }  // the scope is gone; its task still runs and must still be accounted without a crash
  EXPECT_FALSE(weak.expired());
  run_until(io, [&] { return finished.load() == 1; });
  EXPECT_EQ(finished.load(), 1);
  EXPECT_TRUE(weak.expired()) << "the owner must be released once the task has ended";
}


asio::awaitable<void> instant(std::atomic<int>* finished) {
  finished->fetch_add(1);
  co_return;
}

TEST(DrainScope, ACancelQueuedBehindATaskThatEndsFirstIsHarmless) {
  // The task ends on its first run, before the emit that cancel() queued behind it: the emit
  // must find its task's signal still alive (ASan/LSan in the dev build check the reference).
  asio::io_context io;
  DrainScope scope("test");
  std::atomic<int> finished{0};
  for (int i = 0; i < 3; ++i) scope.spawn(io.get_executor(), instant(&finished), "instant");
  scope.cancel();
  EXPECT_EQ(scope.active(), 3u);
  io.run();
  EXPECT_EQ(finished.load(), 3);
  EXPECT_EQ(scope.active(), 0u);
  EXPECT_EQ(scope.failures(), 0u);
}

TEST(DrainScope, RunKeepsGoingWhileATaskIsSuspendedWithNothingPending) {
  // What co_spawn's work guard did: a task parked on a net::Signal holds no operation, yet
  // run() must not return while it lives.
  asio::io_context io;
  DrainScope scope("test");
  Signal signal;
  std::atomic<int> finished{0};
  scope.spawn(
      io.get_executor(),
      [](Signal& s, std::atomic<int>* done) -> asio::awaitable<void> {
        co_await s.wait();
        done->fetch_add(1);
      }(signal, &finished),
      "parked");
  std::thread notifier([&] {
    std::this_thread::sleep_for(50ms);  // run() has to outlast this with no operation pending
    asio::post(io, [&] { signal.notify(); });
  });
  io.run();  // returns only once the task has ended
  notifier.join();
  EXPECT_EQ(finished.load(), 1);
  EXPECT_EQ(scope.active(), 0u);
}

TEST(DrainScope, AnIoContextDestroyedUnderParkedTasksLeaksNothing) {
  // Both orders: scope first, then the io_context; and the io_context first. LSan (dev build)
  // fails the test if a task's bookkeeping outlives both.
  std::atomic<int> finished{0};
  std::atomic<int> aborted{0};
  {
    auto io = std::make_unique<asio::io_context>();
    auto scope = std::make_unique<DrainScope>("test");
    scope->spawn(io->get_executor(), sleeper(1h, &finished, &aborted), "parked-1");
    io->run_one_for(10ms);
    EXPECT_EQ(scope->active(), 1u);
    scope.reset();
    io.reset();
  }
  {
    auto io = std::make_unique<asio::io_context>();
    DrainScope scope("test");
    scope.spawn(io->get_executor(), sleeper(1h, &finished, &aborted), "parked-2");
    io->run_one_for(10ms);
    io.reset();
  }
  EXPECT_EQ(finished.load(), 0);
}

}  // namespace
}  // namespace meshnode::net
