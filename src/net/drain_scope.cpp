#include "net/drain_scope.hpp"

#include <asio/bind_cancellation_slot.hpp>
#include <asio/cancellation_signal.hpp>
#include <asio/dispatch.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/prefer.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <vector>

#include "base/error.hpp"
#include "net/awaitable.hpp"
#include "net/thread_entry.hpp"
#include "telemetry/metrics.hpp"

namespace meshnode::net {
namespace {

using Clock = std::chrono::steady_clock;

struct Waiter {
  asio::any_io_executor executor;
  std::shared_ptr<asio::steady_timer> timer;
};

}  // namespace

// One live task: a single allocation (160 B class) linked into its scope's list, where a map
// entry, a shared cancellation signal and a wrapper coroutine took ~400 B (issue 15, idle memory).
// Owned by references: the scope's list holds one until the task ends, and each cancel() posted
// to the task's executor holds one until it has run (or was dropped with its io_context).
struct DrainScope::Task {
  Task* prev = nullptr;  // guarded by State::mutex, as is next
  Task* next = nullptr;
  std::atomic<std::uint32_t> refs{1};
  asio::any_io_executor executor;  // where cancel() emits
  asio::cancellation_signal signal;
  std::string id;
  std::shared_ptr<const void> owner;

  void release() noexcept {
    if (refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }
};

struct DrainScope::State {
  State(std::string scope_name, telemetry::Counter* metric) : name(std::move(scope_name)), failures_metric(metric) {}

  // Tasks whose threads were destroyed without finishing (their io_context went first): the
  // frames that referred to them are gone, since each held this State.
  ~State() {
    while (head != nullptr) {
      Task* t = head;
      head = t->next;
      t->release();
    }
  }

  void link(Task* t) {
    std::lock_guard lock(mutex);
    t->next = head;
    if (head != nullptr) head->prev = t;
    head = t;
    active.fetch_add(1, std::memory_order_acq_rel);
  }

  void finish(Task* t, const std::exception_ptr& error) noexcept {
    if (error) {
      failures.fetch_add(1, std::memory_order_relaxed);
      if (failures_metric != nullptr) failures_metric->inc();
      spdlog::error("task failed\tscope=\"{}\" id={} error=\"{}\"", name, t->id.empty() ? "-" : t->id,
                    base::exception_message(error));
    }
    t->owner.reset();
    std::vector<Waiter> wake;
    {
      std::lock_guard lock(mutex);
      if (t->prev != nullptr) t->prev->next = t->next;
      else head = t->next;
      if (t->next != nullptr) t->next->prev = t->prev;
      if (active.fetch_sub(1, std::memory_order_acq_rel) == 1) wake.swap(waiters);
    }
    t->release();
    // Timers belong to their waiter's executor: cancel them there.
    for (auto& w : wake) asio::post(w.executor, [timer = std::move(w.timer)] { timer->cancel(); });
  }

  const std::string name;
  telemetry::Counter* const failures_metric;
  std::atomic<std::size_t> active{0};
  std::atomic<std::uint64_t> failures{0};
  std::mutex mutex;
  Task* head = nullptr;           // guarded by mutex
  std::vector<Waiter> waiters;    // guarded by mutex
};

namespace {

// The task's thread: cancellation reported as error codes, never as exceptions (STYLE: no
// exception crosses a connection coroutine); the end is accounted inline, on the task's executor.
// `work` is the task's executor, tracked: the io_context keeps running while the task lives, even
// suspended with nothing pending (as co_spawn's work guard does). In the frame, not in the Task: a
// Task can outlive its io_context.
ThreadEntry run_task(std::shared_ptr<DrainScope::State> state, DrainScope::Task* task, asio::awaitable<void> body,
                     [[maybe_unused]] asio::any_io_executor work) {
  co_await asio::this_coro::throw_if_cancelled(false);
  // spawn() may come from any thread: the task runs on its executor (inline when already there).
  co_await asio::dispatch(asio::use_awaitable);
  std::exception_ptr error;
  try {
    co_await std::move(body);
  } catch (...) {
    error = std::current_exception();
  }
  state->finish(task, error);
}

}  // namespace

DrainScope::DrainScope(std::string name, telemetry::Counter* failures)
    : state_(std::make_shared<State>(std::move(name), failures)) {}

DrainScope::~DrainScope() = default;

void DrainScope::spawn(const asio::any_io_executor& executor, asio::awaitable<void> task, std::string id,
                       std::shared_ptr<const void> owner) {
  auto* t = new Task;
  t->executor = executor;
  t->id = std::move(id);
  t->owner = std::move(owner);
  state_->link(t);
  launch(run_task(state_, t, std::move(task), asio::prefer(executor, asio::execution::outstanding_work.tracked)),
         executor, t->signal.slot());
}

void DrainScope::cancel() {
  std::lock_guard lock(state_->mutex);
  for (Task* t = state_->head; t != nullptr; t = t->next) {
    t->refs.fetch_add(1, std::memory_order_relaxed);
    // The reference is dropped by the handler, run or destroyed unrun.
    auto ref = std::unique_ptr<Task, void (*)(Task*)>(t, [](Task* p) { p->release(); });
    asio::post(t->executor, [ref = std::move(ref)] { ref->signal.emit(asio::cancellation_type::terminal); });
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
