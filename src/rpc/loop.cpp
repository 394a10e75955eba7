#include "rpc/loop.hpp"

#include <pthread.h>

#include <future>
#include <vector>

#include "base/check.hpp"

namespace meshnode::rpc {
namespace {

std::chrono::system_clock::time_point to_system(std::chrono::steady_clock::time_point when) {
  auto delta = when - std::chrono::steady_clock::now();
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(delta);
}

}  // namespace

CompletionLoop::CompletionLoop(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { run(); });
}

CompletionLoop::~CompletionLoop() { stop(); }

void* CompletionLoop::add(std::unique_ptr<Op> op) {
  Op* raw = op.get();
  ops_.emplace(raw, std::move(op));
  return raw;
}

void* CompletionLoop::tag(Handler handler) {
  std::lock_guard lock(mu_);
  MESHNODE_CHECK(!stopping_ || in_loop(), "CompletionLoop::tag after stop");
  auto op = std::make_unique<Op>();
  op->handler = std::move(handler);
  return add(std::move(op));
}

void CompletionLoop::post(std::function<void()> fn) {
  schedule(std::chrono::steady_clock::now(), std::move(fn));
}

CompletionLoop::TimerId CompletionLoop::schedule(std::chrono::steady_clock::time_point when,
                                                 std::function<void()> fn) {
  std::lock_guard lock(mu_);
  if (stopping_) return 0;
  auto op = std::make_unique<Op>();
  op->timer = next_timer_++;
  // A cancelled alarm completes with ok=false: the function then does not run.
  op->handler = [fn = std::move(fn)](bool ok) {
    if (ok) fn();
  };
  op->alarm = std::make_unique<::grpc::Alarm>();
  ::grpc::Alarm* alarm = op->alarm.get();
  TimerId id = op->timer;
  void* t = add(std::move(op));
  timers_.emplace(id, static_cast<Op*>(t));
  alarm->Set(&cq_, to_system(when), t);
  return id;
}

void CompletionLoop::cancel(TimerId id) {
  std::lock_guard lock(mu_);
  auto it = timers_.find(id);
  if (it == timers_.end()) return;
  it->second->alarm->Cancel();
  timers_.erase(it);
}

void CompletionLoop::run_sync(std::function<void()> fn) {
  MESHNODE_CHECK(!in_loop(), "CompletionLoop::run_sync from the loop thread would deadlock");
  std::promise<void> done;
  auto future = done.get_future();
  TimerId id = schedule(std::chrono::steady_clock::now(), [&fn, &done] {
    fn();
    done.set_value();
  });
  if (id == 0) return;
  future.wait();
}

void CompletionLoop::run() {
  thread_id_.store(std::this_thread::get_id());
  pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
  void* t = nullptr;
  bool ok = false;
  while (cq_.Next(&t, &ok)) {
    std::unique_ptr<Op> op;
    {
      std::lock_guard lock(mu_);
      auto it = ops_.find(static_cast<Op*>(t));
      MESHNODE_CHECK(it != ops_.end(), "completion for an unknown tag");
      op = std::move(it->second);
      ops_.erase(it);
      if (op->timer != 0) timers_.erase(op->timer);
    }
    op->handler(ok);
  }
}

void CompletionLoop::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (auto& [id, op] : timers_) op->alarm->Cancel();
    timers_.clear();
  }
  // Pending calls still return their tags after Shutdown; Next() returns false once all have.
  cq_.Shutdown();
  if (thread_.joinable()) thread_.join();
}

}  // namespace meshnode::rpc
