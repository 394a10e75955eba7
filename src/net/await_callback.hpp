#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "net/awaitable.hpp"

namespace meshnode::net {

/// Waits, on the calling coroutine's executor, for a callback API to answer: `start(reply)` is
/// called once and must arrange for `reply(value)` to run exactly once, on any thread, inline or
/// later (even after the wait gave up: a late reply is dropped). Returns the value, or nullopt when
/// `timeout` passes first. If the coroutine is destroyed while it waits, a later reply posts nothing.
template <class T>
asio::awaitable<std::optional<T>> await_callback(std::chrono::steady_clock::duration timeout,
                                                 const std::function<void(std::function<void(T)>)>& start) {
  struct Waiter {
    explicit Waiter(const asio::any_io_executor& ex) : timer(ex) {}
    asio::steady_timer timer;
    std::mutex mu;
    bool closed = false;       // guarded by mu: the waiting coroutine has ended
    std::optional<T> result;   // the executor's thread only
  };
  auto ex = co_await asio::this_coro::executor;
  auto waiter = std::make_shared<Waiter>(ex);
  waiter->timer.expires_after(timeout);
  struct Close {
    Waiter& w;
    ~Close() {
      std::lock_guard lock(w.mu);
      w.closed = true;
    }
  } close{*waiter};
  start([waiter, ex](T value) {
    std::lock_guard lock(waiter->mu);
    if (waiter->closed) return;
    asio::post(ex, [waiter, value = std::move(value)]() mutable {
      if (waiter->result) return;
      waiter->result = std::move(value);
      waiter->timer.cancel();
    });
  });
  while (!waiter->result) {
    auto [ec] = co_await waiter->timer.async_wait(kNoThrow);
    if (!waiter->result && !ec) co_return std::nullopt;
  }
  co_return std::move(waiter->result);
}

}  // namespace meshnode::net
