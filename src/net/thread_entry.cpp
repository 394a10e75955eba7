#include "net/thread_entry.hpp"

#include <asio/cancellation_state.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/version.hpp>

// awaitable_handler's constructor and launch() are Asio internals; their shape is the one
// initiate_co_spawn uses in this version. A new Asio must be checked against impl/co_spawn.hpp.
static_assert(ASIO_VERSION / 100 == 1022, "net::launch uses Asio 1.22's awaitable internals: recheck them");

namespace meshnode::net {

void launch(ThreadEntry entry, const asio::any_io_executor& executor, asio::cancellation_slot slot) {
  // One cancellation state, filtering to terminal cancellation (co_spawn stacks two, the outer
  // one to pass total cancellation, which no caller here emits).
  asio::cancellation_state state = slot.is_connected() ? asio::cancellation_state(slot) : asio::cancellation_state();
  asio::detail::awaitable_handler<asio::any_io_executor, void>(std::move(entry), executor, slot, state).launch();
}

asio::awaitable<void> launch_here(ThreadEntry entry) {
  launch(std::move(entry), co_await asio::this_coro::executor);
}

}  // namespace meshnode::net
