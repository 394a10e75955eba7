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
  // Shared with the reply, which may outlive the coroutine and even its io_context (a source that
  // holds callbacks until it is destroyed): no Asio object in here, only plain state.
  struct Shared {
    std::mutex mu;
    bool closed = false;                   // guarded by mu: the waiting coroutine has ended
    asio::steady_timer* timer = nullptr;   // the waiting frame's timer; executor thread only
    std::optional<T> result;               // executor thread only
  };
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  timer.expires_after(timeout);
  auto shared = std::make_shared<Shared>();
  shared->timer = &timer;
  struct Close {
    Shared& s;
    ~Close() {
      std::lock_guard lock(s.mu);
      s.closed = true;
      s.timer = nullptr;
    }
  } close{*shared};
  start([shared, ex](T value) {
    std::lock_guard lock(shared->mu);
    if (shared->closed) return;
    asio::post(ex, [shared, value = std::move(value)]() mutable {
      if (shared->timer == nullptr || shared->result) return;
      shared->result = std::move(value);
      shared->timer->cancel();
    });
  });
  while (!shared->result) {
    auto [ec] = co_await timer.async_wait(kNoThrow);
    if (!shared->result && !ec) co_return std::nullopt;
  }
  co_return std::move(shared->result);
}

}  // namespace meshnode::net
