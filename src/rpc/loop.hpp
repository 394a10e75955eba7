#pragma once

// gRPC's completion queue, wrapped once (STYLE "Async"): one thread that runs every completion of
// the calls started on it, plus posted functions and timers, in order. Callers never see tags.

#include <grpcpp/alarm.h>
#include <grpcpp/completion_queue.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

namespace meshnode::rpc {

/// A thread draining one grpc::CompletionQueue. Every handler runs on that thread, one at a time,
/// so code driven by one loop needs no locks for its own state. Handlers must not block for long
/// (they delay every other completion on the loop).
class CompletionLoop {
 public:
  /// Runs on the loop thread with the `ok` flag of the completed gRPC operation.
  using Handler = std::function<void(bool ok)>;
  using TimerId = std::uint64_t;

  /// Starts the thread (named `name`, up to 15 characters, for top/gdb).
  explicit CompletionLoop(std::string name);
  /// stop().
  ~CompletionLoop();
  CompletionLoop(const CompletionLoop&) = delete;
  CompletionLoop& operator=(const CompletionLoop&) = delete;

  /// The queue to start async gRPC operations on (from the loop thread).
  [[nodiscard]] ::grpc::CompletionQueue* cq() noexcept { return &cq_; }

  /// A tag for one async gRPC operation; `handler` runs once when the operation completes. The loop
  /// owns the tag until then. Loop thread only (gRPC operations are started there).
  [[nodiscard]] void* tag(Handler handler);

  /// Runs `fn` on the loop thread soon. Any thread. Dropped after stop() began.
  void post(std::function<void()> fn);

  /// Runs `fn` on the loop thread at `when` (steady clock) unless cancelled first. Any thread.
  /// @returns an id for cancel(); 0 when the loop is stopping (fn will never run).
  TimerId schedule(std::chrono::steady_clock::time_point when, std::function<void()> fn);
  /// Cancels a timer that has not fired yet (no-op otherwise). Any thread.
  void cancel(TimerId id);

  /// Runs `fn` on the loop thread and waits for it to return. Not from the loop thread; a no-op
  /// once stop() began. Owners use it to flag themselves stopping and cancel their calls.
  void run_sync(std::function<void()> fn);

  /// Cancels pending timers, lets every outstanding operation complete (their handlers run with
  /// ok=false as gRPC reports them), then joins the thread. Owners must have cancelled their calls
  /// (ClientContext::TryCancel) first, or this waits for them to end. Idempotent; not from the loop.
  void stop();

  /// true on the loop thread.
  [[nodiscard]] bool in_loop() const noexcept { return std::this_thread::get_id() == thread_id_.load(); }

 private:
  struct Op {
    Handler handler;
    std::unique_ptr<::grpc::Alarm> alarm;  // set for posts and timers
    TimerId timer = 0;
  };
  void* add(std::unique_ptr<Op> op);
  void run();

  ::grpc::CompletionQueue cq_;
  std::mutex mu_;
  bool stopping_ = false;                             // guarded by mu_
  std::unordered_map<Op*, std::unique_ptr<Op>> ops_;  // guarded by mu_: every in-flight tag
  std::unordered_map<TimerId, Op*> timers_;           // guarded by mu_
  TimerId next_timer_ = 1;                            // guarded by mu_
  std::atomic<std::thread::id> thread_id_{};
  std::string name_;
  std::thread thread_;
};

}  // namespace meshnode::rpc
