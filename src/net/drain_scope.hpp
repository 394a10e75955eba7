#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace meshnode::telemetry {
class Counter;
}

namespace meshnode::net {

/// The tasks one component has spawned and must answer for (STYLE "Async": nothing is spawned
/// detached without being counted). Every connection, session and control loop of the proxy is
/// spawned through a DrainScope, so shutdown can stop accepting, wait for the tasks with a
/// deadline, then cancel what is left, and no task ends with an exception unnoticed.
///
/// - `spawn` runs a coroutine on an executor and counts it until it ends. The task gets its own
///   cancellation slot: `cancel()` emits terminal cancellation into every live task's slot, on that
///   task's executor, so the operation it awaits completes with `operation_aborted`. Tasks never
///   get an exception for that (their throw_if_cancelled is off): they see the error code, as every
///   other failure, and end through their normal path.
/// - An exception escaping a task is logged at error level with the scope's name and the task's
///   id (the connection id for connections) and counted: `failures()` and, when given, the
///   `failures` metric. The other tasks go on.
/// - `wait_idle` completes as soon as no task is active (woken by the last task's end, no polling)
///   or when its deadline passes.
///
/// Thread-safe: any thread may spawn (onto any executor), cancel, read the counts and wait. The
/// scope may be destroyed while tasks still run: their accounting lives on until the last ends.
class DrainScope {
 public:
  /// `name` labels log lines ("data path", "control", "http admin"); `failures` (may be null, must
  /// outlive the tasks) is incremented for each task that ended with an exception.
  explicit DrainScope(std::string name, telemetry::Counter* failures = nullptr);
  ~DrainScope();
  DrainScope(const DrainScope&) = delete;
  DrainScope& operator=(const DrainScope&) = delete;

  /// Starts `task` on `executor`. `id` names it in a failure log line. `owner`, when given, is kept
  /// alive until the task has ended (a member coroutine's object, shared by its tasks).
  void spawn(const asio::any_io_executor& executor, asio::awaitable<void> task, std::string id,
             std::shared_ptr<const void> owner = nullptr);

  /// Emits terminal cancellation into every live task's slot (each on its own executor; returns
  /// before they have run). Tasks spawned later are not affected.
  void cancel();

  /// Tasks spawned and not yet ended. Any thread; exact once they all run on stopped executors.
  [[nodiscard]] std::size_t active() const noexcept;
  /// Tasks that ended with an exception, since construction.
  [[nodiscard]] std::uint64_t failures() const noexcept;
  [[nodiscard]] const std::string& name() const noexcept;

  /// Waits on the calling coroutine's executor until no task is active or `deadline` passes.
  /// @returns true when idle, false when the deadline passed with tasks still active.
  [[nodiscard]] asio::awaitable<bool> wait_idle(std::chrono::steady_clock::time_point deadline);

  struct State;  // implementation types: opaque, named here for the task's entry coroutine
  struct Task;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace meshnode::net
