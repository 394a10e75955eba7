#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/error.hpp"
#include "h2/core.hpp"
#include "h2/header.hpp"
#include "tls/tls_stream.hpp"
#include "net/byte_stream.hpp"
#include "net/drain_scope.hpp"

#include <nghttp2/nghttp2.h>

namespace meshnode::h2 {

/// The TLS connection a session runs over (tls/ owns the OpenSSL wrapper).
using TlsSocket = tls::TlsStream;

class Session;

/// One HTTP/2 stream as a byte stream: DATA frames carry the bytes, END_STREAM is EOF, RST_STREAM
/// is a reset (RFC 9113 §8.5: CONNECT tunnels). Flow control is per stream: bytes are
/// acknowledged (WINDOW_UPDATE) only when `read_some` hands them to the caller, so a slow reader
/// stalls only its own stream. Lives on the session's io_context thread.
class Stream final : public net::ByteStream, public StreamCore {
 public:
  Stream(std::shared_ptr<Session> session, std::int32_t id);
  ~Stream() override;

  asio::awaitable<base::Result<std::size_t>> read_some(std::span<std::byte> buf) override;
  asio::awaitable<base::Result<void>> write_all(std::span<const std::byte> data) override;
  asio::awaitable<base::Result<void>> shutdown_write() override;
  /// Sends RST_STREAM(CONNECT_ERROR) unless already closed; wakes pending reads and writes.
  void reset() override;
  asio::awaitable<void> wait_readable() override;
  [[nodiscard]] bool readable_now() override { return !recv_.empty() || reset_ || recv_eof_ || closed_; }
  /// Takes received DATA bytes without waiting (returning their window credit, as read_some);
  /// 0 when none are queued. END_STREAM and resets stay for read_some.
  [[nodiscard]] std::size_t read_now(std::span<std::byte> buf) override {
    return recv_.empty() ? 0 : take_received(buf);
  }
  /// Hands over the receive queue's blocks (returning their credit, as read_some).
  [[nodiscard]] std::size_t take_input(net::OwnedBytes& into) override {
    return recv_.empty() ? 0 : take_received_blocks(into);
  }
  [[nodiscard]] bool lends_input() const noexcept override { return true; }

  /// Client: waits for the response HEADERS; returns :status. Errc::kReset/kClosed if the stream
  /// or the connection ends first.
  asio::awaitable<base::Result<int>> wait_response();
  /// Server: sends the response. 200 keeps the stream open for DATA both ways; any other status
  /// ends the stream (END_STREAM, then RST_STREAM(NO_ERROR) if the client is still sending) and
  /// discards what the client still sends (its flow-control credit is returned at once).
  base::Result<void> respond(int status, const Headers& extra = {});

  /// Sends RST_STREAM with `error_code` (a peer's behaviour in tests: NO_ERROR, CANCEL).
  void reset_for_test(std::uint32_t error_code);

 private:
  friend class Session;
  /// Frames `data` now, from the caller's buffer, when the session can send inline, and queues
  /// (copies) what that send leaves; else queues it all and wakes the writer. The caller checked
  /// send_room(); `data` may be reused once this returns.
  void send_or_queue(std::span<const std::byte> data);
  void wake_readable() override;
  void wake_writable() override { writable_.notify(); }

  std::shared_ptr<Session> session_;
  net::Signal readable_;
  net::Signal writable_;
  bool wake_deferred_ = false;  ///< in the session's deferred wakes of the read being processed
};

/// An HTTP/2 connection over TLS, driven by two coroutines (socket → nghttp2, nghttp2 → socket)
/// plus a PING keepalive. Owned by shared_ptr: its coroutines and every open Stream keep it alive.
/// All methods run on the io_context thread the socket belongs to.
class Session final : public SessionCore, public std::enable_shared_from_this<Session> {
 public:
  using Role = h2::Role;
  /// Server: called once per stream whose request HEADERS are complete; spawns its own work.
  using StreamHandler = std::function<void(std::shared_ptr<Stream>)>;

  /// Wraps an already handshaken TLS socket. Errc::kInternal if nghttp2 cannot be set up.
  [[nodiscard]] static base::Result<std::shared_ptr<Session>> create(TlsSocket socket, Role role, Settings settings,
                                                                     StreamHandler handler = {});
  ~Session();

  /// Sends the connection preface/SETTINGS and starts the coroutines (reader, writer, keepalive)
  /// in `tasks`, which must outlive them; they end when the connection does.
  void start(net::DrainScope& tasks);
  /// Client: submits a request (HBONE: :method CONNECT + :authority + extra headers) with an open
  /// DATA source. `first` is the stream's first DATA, framed in the same write as the HEADERS, so
  /// both travel in one TLS record when they fit; the caller may reuse its buffer once this
  /// returns. Keep it within 16 KiB, what a new stream always has room for: more is queued past
  /// the stream's send budget. Errc::kClosed if the connection is dead or going away.
  [[nodiscard]] base::Result<std::shared_ptr<Stream>> open_stream(const Headers& headers,
                                                                  std::span<const std::byte> first = {});

  /// True while new streams may be opened (alive, no GOAWAY).
  [[nodiscard]] bool accepting() const noexcept { return !dead_ && !goaway_ && !draining_; }
  [[nodiscard]] bool alive() const noexcept { return !dead_; }
  [[nodiscard]] std::size_t active_streams() const noexcept { return streams_.size(); }
  /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS (0xffffffff until its SETTINGS arrive).
  [[nodiscard]] std::uint32_t peer_max_concurrent_streams() const noexcept;

  /// Graceful: no new stream is taken, open streams finish, then the connection closes.
  /// Server: two GOAWAYs (RFC 9113 §6.8): first a shutdown notice (last-stream-id 2^31-1) and a
  /// PING; once the PING is acknowledged, every CONNECT the client sent before it saw the notice
  /// has arrived and is served, and the final GOAWAY names the last of them. A single GOAWAY would
  /// refuse the CONNECTs already on the wire (a rollout's old proxy did that to new connections).
  /// Client: one GOAWAY (the server opens no streams).
  void drain();
  /// Server, for tests: one GOAWAY(NO_ERROR) naming the last stream processed so far, as a peer
  /// that drains abruptly sends it (streams on the wire beyond it are refused).
  void goaway_now_for_test();
  /// Closes the connection now; every open stream sees a reset.
  void abort(std::string_view reason);

  /// Bytes allocated for outgoing frames and their ciphertext (write batch + TLS output buffer
  /// capacities). They grow with the largest batch and are released after a keepalive interval
  /// without DATA sent.
  [[nodiscard]] std::size_t write_buffer_bytes() const noexcept { return out_.capacity() + socket_.output_capacity(); }

  TlsSocket& socket() noexcept { return socket_; }

 private:
  friend class Stream;
  Session(TlsSocket socket, Role role, Settings settings, StreamHandler handler);
  asio::awaitable<void> read_loop(std::shared_ptr<Session> self);
  asio::awaitable<void> write_loop(std::shared_ptr<Session> self);
  asio::awaitable<void> keepalive_loop(std::shared_ptr<Session> self);
  /// Sends what nghttp2 has queued right now, from the caller's coroutine, when the write loop is
  /// idle and no nghttp2 call is on the stack; otherwise (or on backpressure) wakes the loop.
  void send_now();
  /// True when send_now() would call nghttp2 here and now (it would not just wake the loop).
  [[nodiscard]] bool sends_inline() const noexcept { return !dead_ && !writing_ && !in_nghttp2_; }
  void close_if_idle();
  /// Hands streams whose request headers completed during the last read to the handler, unless
  /// they were closed (reset) meanwhile: a stream reset in the same read never reaches it.
  void dispatch_ready();
  /// Wakes the stream readers the last read woke (deferred_wakes_): `inline_now` runs each of
  /// them here, up to its next suspension (it forwards what it was given before this reader
  /// touches the socket again); else they are posted, as any other wake-up.
  void wake_deferred(bool inline_now);

  // SessionCore hooks.
  StreamCore* find(std::int32_t stream_id) override;
  void begin_stream(std::int32_t stream_id) override;
  void stream_ready(StreamCore& stream) override;
  void stream_closed(std::int32_t stream_id, std::uint32_t code) override;
  void signal_write() override { write_signal_.notify(); }
  void wake_writers() override;
  void on_calm_down() override;
  void on_drain_ping_acked() override;
  /// Submits the GOAWAY that names the last stream we took (at most once).
  void submit_final_goaway();

  TlsSocket socket_;
  StreamHandler handler_;
  std::unordered_map<std::int32_t, std::shared_ptr<Stream>> streams_;
  std::vector<std::shared_ptr<Stream>> ready_;  ///< request headers complete, handler not called yet
  net::Signal write_signal_;
  asio::steady_timer keepalive_timer_;
  std::chrono::steady_clock::time_point ping_sent_{};
  /// data_sent_ at the last keepalive tick: the connection carried no DATA for a whole interval
  /// when it has not moved (our own PINGs and their acks do not count).
  std::uint64_t data_sent_at_tick_ = 0;
  bool writing_ = false;  ///< the write loop is inside socket_.write_all (it may be suspended there)
  bool in_nghttp2_ = false;  ///< an nghttp2 call (and so maybe our callbacks) is on the stack
  /// While the reader hands a read to nghttp2: stream readers woken by it are collected in
  /// deferred_wakes_ and woken by wake_deferred() once nghttp2 has returned.
  bool defer_wakes_ = false;
  std::vector<std::shared_ptr<Stream>> deferred_wakes_;
  std::vector<std::shared_ptr<Stream>> waking_;  ///< wake_deferred()'s batch (keeps its capacity)
  bool draining_ = false;
  bool final_goaway_ = false;  ///< the GOAWAY naming our last stream is submitted
  std::string close_reason_;
};

}  // namespace meshnode::h2
