#include "net/drain_scope.hpp"

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/co_spawn.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/error.hpp"
#include "net/awaitable.hpp"
#include "telemetry/metrics.hpp"

namespace meshnode::net {
namespace {

using Clock = std::chrono::steady_clock;

struct Task {
  asio::any_io_executor executor;
  std::shared_ptr<asio::cancellation_signal> signal;
};

struct Waiter {
  asio::any_io_executor executor;
  std::shared_ptr<asio::steady_timer> timer;
};

// Runs the task with cancellation reported as error codes, never as exceptions (STYLE: no
// exception crosses a connection coroutine); `owner` lives as long as this frame.
asio::awaitable<void> run_task(asio::awaitable<void> task, std::shared_ptr<const void> owner) {
  co_await asio::this_coro::throw_if_cancelled(false);
  co_await std::move(task);
  owner.reset();
}

}  // namespace

struct DrainScope::State {
  State(std::string scope_name, telemetry::Counter* metric) : name(std::move(scope_name)), failures_metric(metric) {}

  void finish(std::uint64_t key, const std::string& id, const std::exception_ptr& error) {
    if (error) {
      failures.fetch_add(1, std::memory_order_relaxed);
      if (failures_metric != nullptr) failures_metric->inc();
      spdlog::error("task failed\tscope=\"{}\" id={} error=\"{}\"", name, id.empty() ? "-" : id, base::exception_message(error));
    }
    std::vector<Waiter> wake;
    {
      std::lock_guard lock(mutex);
      tasks.erase(key);
      if (active.fetch_sub(1, std::memory_order_acq_rel) == 1) wake.swap(waiters);
    }
    // Timers belong to their waiter's executor: cancel them there.
    for (auto& w : wake) asio::post(w.executor, [timer = std::move(w.timer)] { timer->cancel(); });
  }

  const std::string name;
  telemetry::Counter* const failures_metric;
  std::atomic<std::size_t> active{0};
  std::atomic<std::uint64_t> failures{0};
  std::mutex mutex;
  std::uint64_t next_key = 0;                       // guarded by mutex
  std::unordered_map<std::uint64_t, Task> tasks;    // guarded by mutex
  std::vector<Waiter> waiters;                      // guarded by mutex
};

DrainScope::DrainScope(std::string name, telemetry::Counter* failures)
    : state_(std::make_shared<State>(std::move(name), failures)) {}

DrainScope::~DrainScope() = default;

void DrainScope::spawn(const asio::any_io_executor& executor, asio::awaitable<void> task, std::string id,
                       std::shared_ptr<const void> owner) {
  auto signal = std::make_shared<asio::cancellation_signal>();
  std::uint64_t key = 0;
  {
    std::lock_guard lock(state_->mutex);
    key = state_->next_key++;
    state_->tasks.emplace(key, Task{executor, signal});
    state_->active.fetch_add(1, std::memory_order_acq_rel);
  }
  auto slot = signal->slot();
  asio::co_spawn(executor, run_task(std::move(task), std::move(owner)),
                 asio::bind_cancellation_slot(
                     slot, [state = state_, key, id = std::move(id), signal = std::move(signal)](std::exception_ptr e) {
                       state->finish(key, id, e);
                     }));
}

void DrainScope::cancel() {
  std::lock_guard lock(state_->mutex);
  for (const auto& [key, task] : state_->tasks) {
    asio::post(task.executor, [signal = task.signal] { signal->emit(asio::cancellation_type::terminal); });
  }
}

std::size_t DrainScope::active() const noexcept { return state_->active.load(std::memory_order_acquire); }

std::uint64_t DrainScope::failures() const noexcept { return state_->failures.load(std::memory_order_relaxed); }

const std::string& DrainScope::name() const noexcept { return state_->name; }

asio::awaitable<bool> DrainScope::wait_idle(Clock::time_point deadline) {
  auto state = state_;
  auto executor = co_await asio::this_coro::executor;
  auto timer = std::make_shared<asio::steady_timer>(executor, deadline);
  for (;;) {
    {
      std::lock_guard lock(state->mutex);
      if (state->active.load(std::memory_order_acquire) == 0) break;
      state->waiters.push_back(Waiter{executor, timer});
    }
    // Woken early by the last task's end (its post runs on this executor after the wait is queued).
    co_await timer->async_wait(kNoThrow);
    {
      std::lock_guard lock(state->mutex);
      std::erase_if(state->waiters, [&](const Waiter& w) { return w.timer == timer; });
    }
    if (Clock::now() >= deadline) break;
  }
  co_return state->active.load(std::memory_order_acquire) == 0;
}

}  // namespace meshnode::net
