#pragma once

#include <asio/experimental/as_tuple.hpp>
#include <asio/use_awaitable.hpp>

namespace meshnode::net {

/// Completion token for coroutines that must not throw: `auto [ec, n] = co_await op(..., kNoThrow);`.
/// (Asio 1.22 keeps as_tuple under experimental.)
inline constexpr auto kNoThrow = asio::experimental::as_tuple(asio::use_awaitable);

}  // namespace meshnode::net
