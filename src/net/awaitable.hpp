#pragma once

#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

namespace meshnode::net {

/// Completion token for coroutines that must not throw: `auto [ec, n] = co_await op(..., kNoThrow);`.
/// (Asio 1.22 keeps as_tuple under experimental.)
inline constexpr auto kNoThrow = asio::experimental::as_tuple(asio::use_awaitable);

/// An awaitable that completes at once, without a scheduler hop: what a plain function returning
/// asio::awaitable<void> returns when it has nothing to wait for. (Such functions keep their
/// locals out of the caller's coroutine chain: a frame of their own would live while it waits.)
asio::awaitable<void> ready_now();

}  // namespace meshnode::net
