#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <functional>
#include <memory>

namespace meshnode::net {

/// Runs `on_expire` once if the deadline passes before this object is destroyed or `cancel()`ed.
/// Used to bound connects, handshakes and CONNECT responses: `on_expire` closes or resets the
/// thing being awaited, which then completes with an error. Single-threaded (the io_context's).
class Deadline {
 public:
  Deadline(const asio::any_io_executor& ex, std::chrono::steady_clock::duration after, std::function<void()> on_expire)
      : timer_(ex, after), state_(std::make_shared<State>()) {
    timer_.async_wait([state = state_, fn = std::move(on_expire)](const std::error_code& ec) {
      if (!ec && state->armed) {
        state->armed = false;
        state->fired = true;
        fn();
      }
    });
  }
  ~Deadline() { cancel(); }
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;

  /// Disarms the deadline. Safe to call more than once.
  void cancel() {
    state_->armed = false;
    timer_.cancel();
  }
  /// True once `on_expire` ran.
  [[nodiscard]] bool expired() const noexcept { return state_->fired; }

 private:
  struct State {
    bool armed = true;
    bool fired = false;
  };
  asio::steady_timer timer_;
  std::shared_ptr<State> state_;
};

}  // namespace meshnode::net
