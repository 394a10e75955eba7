#pragma once

#include <asio/awaitable.hpp>

#include <cstdint>
#include <optional>

#include "telemetry/metrics.hpp"
#include "base/error.hpp"
#include "net/byte_stream.hpp"
#include "proxy/transferred.hpp"

namespace meshnode::proxy {

/// Copies both directions concurrently until each has seen EOF; EOF on one side half-closes the
/// other (shutdown_write), so half-closed protocols work. A reset or error on either side resets
/// both sides (RST ↔ RST_STREAM) and ends both directions. Read buffers grow with the traffic of
/// their direction: 1 KiB, then 16 KiB after 128 KiB, then 128 KiB after 10 MiB (ztunnel's
/// schedule, which ends at 256 KiB); a 1 KiB read that comes back full takes what else is
/// already readable (up to 16 KiB) before writing, so a message just over 1 KiB leaves as one
/// write. A direction holds no buffer before its first byte, and gives a 16 or 128 KiB one back
/// whenever a read drained its source and nothing more is readable, so idle and stalled
/// connections stay small (≤ 1 KiB per direction). `to_upstream`/`to_downstream` (may be null) are
/// incremented live. The outcome goes to `moved`, which must start empty: its byte counts grow as
/// the bytes move, and its error is the first of either direction (client → server's if both). Not a
/// result: that would take a slot in the frame of every caller for the connection's whole life
/// (GCC keeps co_await results in the frame). Runs on the streams' thread.
asio::awaitable<void> copy_bidirectional(net::ByteStream& downstream, net::ByteStream& upstream,
                                         telemetry::Counter* to_upstream, telemetry::Counter* to_downstream,
                                         Transferred& moved);

}  // namespace meshnode::proxy
