#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/awaitable.hpp>
#include <asio/cancellation_signal.hpp>

namespace meshnode::net {

/// The bottom frame of an Asio thread of execution (the kind of coroutine asio::co_spawn runs its
/// task under): a coroutine returning ThreadEntry may `co_await` any asio::awaitable and is started
/// with `launch`. Why not co_spawn: its entry frame holds the executor four times (56 B each), two
/// work guards among them, three copies of the completion handler, and a second cancellation
/// state, which comes to 512 B, and every connection of the proxy has two such threads (its task
/// and its second copy direction; issue 15, idle memory). An entry of our own holds only what its
/// task needs: measured 320 B for a DrainScope task, 224 B for the copy's second direction.
/// Relies on Asio 1.22's awaitable internals (asio::detail::awaitable_thread_entry_point and
/// awaitable_handler, exactly as initiate_co_spawn uses them); net/thread_entry.cpp checks the
/// version.
/// Contract for the entry coroutine: it must not let an exception escape (Asio would rethrow it
/// out of the io_context's run()), and it ends with the thread: nothing is posted after it.
using ThreadEntry = asio::awaitable<asio::detail::awaitable_thread_entry_point, asio::any_io_executor>;

/// Starts `entry` as a new thread of execution on `executor`. It runs inline on the calling thread
/// until its first suspension, as co_spawn does (co_spawn then dispatches to the executor: an
/// entry started from another thread must `co_await asio::dispatch(asio::use_awaitable)` first).
/// Operations it awaits see `slot`'s cancellation (terminal only), when `slot` is connected.
/// Unlike co_spawn, nothing keeps the executor's io_context from running out of work while the
/// thread is suspended with no operation pending: an entry that needs that holds a tracked
/// executor (asio::execution::outstanding_work.tracked) itself.
void launch(ThreadEntry entry, const asio::any_io_executor& executor, asio::cancellation_slot slot = {});

/// `launch(entry, <the calling coroutine's executor>)`, awaited: the executor (56 B) is then held by
/// this short-lived frame, not by the caller's, where every co_await result keeps a slot for the
/// caller's whole life (GCC 12). Completes when `entry` first suspends (or ends).
asio::awaitable<void> launch_here(ThreadEntry entry);

}  // namespace meshnode::net
