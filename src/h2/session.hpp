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
#include "h2/budget.hpp"
#include "h2/byte_queue.hpp"
#include "h2/header.hpp"
#include "tls/tls_stream.hpp"
#include "net/byte_stream.hpp"
#include "net/drain_scope.hpp"

#include <nghttp2/nghttp2.h>

namespace meshnode::h2 {

/// The TLS connection a session runs over (tls/ owns the OpenSSL wrapper).
using TlsSocket = tls::TlsStream;

/// HTTP/2 settings of an HBONE connection. Defaults follow ztunnel (research §2.1: max frame 1 MiB,
/// PING every 10 s, dead after 20 s without PONG) except the receive windows: 1 MiB per stream and
/// 4 MiB per connection instead of 4 / 16 MiB. Windows bound what a receiver buffers for an app
/// that reads slowly; with ztunnel's, proxy B's peak RSS under 4 iperf3 streams was 24-30 MB, with
/// these 15-16 MB at the same throughput (bench/). Cost: one stream tops out at 1 MiB per RTT
/// (8 Gbit/s at 1 ms), ample inside a cluster.
struct Settings {
  std::uint32_t stream_window = 1u << 20;       ///< bytes, SETTINGS_INITIAL_WINDOW_SIZE
  std::uint32_t connection_window = 4u << 20;   ///< bytes, WINDOW_UPDATE on stream 0
  std::uint32_t max_frame = 1u << 20;           ///< bytes, SETTINGS_MAX_FRAME_SIZE
  std::uint32_t max_concurrent_streams = 200;   ///< advertised by servers
  std::uint32_t max_header_list = 65536;        ///< bytes, SETTINGS_MAX_HEADER_LIST_SIZE
  std::size_t stream_send_buffer = 256 * 1024;  ///< bytes queued per stream before write_all waits
  /// Bytes queued for sending across all streams of the connection before write_all waits. A
  /// stream with nothing queued may still queue one small chunk (16 KiB), so one stalled group of
  /// streams never starves the others: the bound is this + 16 KiB per open stream.
  std::size_t connection_send_buffer = 1u << 20;
  /// Server: stream resets the peer may cause per connection (burst, then per second) before the
  /// connection ends with GOAWAY(ENHANCE_YOUR_CALM). Counted: RST_STREAM from the peer before the
  /// response was sent, RST_STREAM we send because of the peer's frames (bad trailers, DATA on a
  /// closed stream, ...), and header lists over `max_header_list`.
  std::uint32_t reset_burst = 200;
  std::uint32_t resets_per_second = 20;
  ViolationCounters counters;
  std::chrono::seconds ping_interval{10};
  std::chrono::seconds ping_timeout{20};
};

class Session;

/// One HTTP/2 stream as a byte stream: DATA frames carry the bytes, END_STREAM is EOF, RST_STREAM
/// is a reset (RFC 9113 §8.5: CONNECT tunnels). Flow control is per stream: bytes are
/// acknowledged (WINDOW_UPDATE) only when `read_some` hands them to the caller, so a slow reader
/// stalls only its own stream. Lives on the session's io_context thread.
class Stream final : public net::ByteStream {
 public:
  Stream(std::shared_ptr<Session> session, std::int32_t id);
  ~Stream() override;

  asio::awaitable<base::Result<std::size_t>> read_some(std::span<std::byte> buf) override;
  asio::awaitable<base::Result<void>> write_all(std::span<const std::byte> data) override;
  asio::awaitable<base::Result<void>> shutdown_write() override;
  /// Sends RST_STREAM(CONNECT_ERROR) unless already closed; wakes pending reads and writes.
  void reset() override;
  asio::awaitable<void> wait_readable() override;

  [[nodiscard]] std::int32_t id() const noexcept { return id_; }
  /// True once the stream is over in HTTP/2 (both END_STREAMs, or a reset, or the connection died):
  /// a server must not start work (dial an upstream) for it.
  [[nodiscard]] bool closed() const noexcept { return closed_; }
  /// Bytes written but not yet handed to the connection (framed as DATA).
  [[nodiscard]] std::size_t send_queued() const noexcept { return send_.size(); }
  /// Request headers (server side) or response headers (client side), pseudo-headers included.
  [[nodiscard]] const Headers& headers() const noexcept { return headers_; }
  /// Value of the first header named `name` (lowercase), empty if absent.
  [[nodiscard]] std::string_view header(std::string_view name) const noexcept;

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
  /// nghttp2 closed the stream with `error_code`: NO_ERROR and CANCEL are EOF (research §2.1
  /// "Data": the reference reads both as a clean end), any other code is a reset.
  void on_closed(std::uint32_t error_code);
  /// Bytes write_all may queue now: what the peer's windows let us send (at least one small
  /// chunk, at most stream_send_buffer) minus what is queued, within the connection's budget.
  [[nodiscard]] std::size_t send_room() const noexcept;
  /// From now on nobody reads: unread bytes and later DATA give their credit back at once.
  void discard_input();
  /// Empties the send queue (a reset or closed stream sends nothing more).
  void drop_send() noexcept;
  void wake() {
    readable_.notify();
    writable_.notify();
  }

  std::shared_ptr<Session> session_;
  std::int32_t id_;
  Headers headers_;
  int status_ = 0;
  bool headers_done_ = false;
  ByteQueue recv_;
  bool recv_eof_ = false;
  ByteQueue send_;
  bool send_eof_ = false;
  bool closed_ = false;
  bool reset_ = false;
  std::size_t header_bytes_ = 0;    ///< RFC 9113 §6.5.2 size of the header block being received
  bool headers_too_large_ = false;
  bool responded_ = false;          ///< server: the response was submitted
  bool discard_input_ = false;      ///< nobody will read: incoming DATA is consumed on arrival
  bool doomed_ = false;             ///< nghttp2 is resetting it for the peer's invalid frames
  // Server: response HEADERS submitted but not yet on the wire. nghttp2 marks a stream CLOSING as
  // soon as RST_STREAM is submitted and then drops its queued HEADERS, so an RST_STREAM wanted
  // meanwhile (non-200 response, or reset() right after respond()) waits in deferred_rst_ until
  // on_frame_send saw the HEADERS go out.
  bool response_pending_ = false;
  std::optional<std::uint32_t> deferred_rst_;
  net::Signal readable_;
  net::Signal writable_;
};

/// An HTTP/2 connection over TLS, driven by two coroutines (socket → nghttp2, nghttp2 → socket)
/// plus a PING keepalive. Owned by shared_ptr: its coroutines and every open Stream keep it alive.
/// All methods run on the io_context thread the socket belongs to.
class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class Role { kClient, kServer };
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
  /// DATA source. Errc::kClosed if the connection is dead or going away.
  [[nodiscard]] base::Result<std::shared_ptr<Stream>> open_stream(const Headers& headers);

  /// True while new streams may be opened (alive, no GOAWAY).
  [[nodiscard]] bool accepting() const noexcept { return !dead_ && !goaway_ && !draining_; }
  [[nodiscard]] bool alive() const noexcept { return !dead_; }
  [[nodiscard]] std::size_t active_streams() const noexcept { return streams_.size(); }
  /// The peer's SETTINGS_MAX_CONCURRENT_STREAMS (0xffffffff until its SETTINGS arrive).
  [[nodiscard]] std::uint32_t peer_max_concurrent_streams() const noexcept;
  /// Bytes the session holds for its streams: queued for sending plus received and unread.
  [[nodiscard]] std::size_t buffered_bytes() const noexcept { return queued_send_ + queued_recv_; }
  /// write_all calls waiting for room (back-pressure from the peer's windows or the send budget).
  [[nodiscard]] std::size_t blocked_writers() const noexcept { return blocked_writers_; }
  /// True once the peer exhausted its reset budget and was sent GOAWAY(ENHANCE_YOUR_CALM).
  [[nodiscard]] bool calmed_down() const noexcept { return calmed_down_; }

  /// Server: a second budget consulted on every charged reset after the connection's own (the
  /// peer identity's, across its connections); returning false ends the connection as if the
  /// connection's budget were exhausted. Set before start().
  using ResetCharge = std::function<bool()>;
  void set_reset_charge(ResetCharge charge) { reset_charge_ = std::move(charge); }

  /// Graceful: sends GOAWAY, lets open streams finish, then closes.
  void drain();
  /// Closes the connection now; every open stream sees a reset.
  void abort(std::string_view reason);

  TlsSocket& socket() noexcept { return socket_; }

 private:
  friend class Stream;
  Session(TlsSocket socket, Role role, Settings settings, StreamHandler handler);
  base::Result<void> init();
  asio::awaitable<void> read_loop(std::shared_ptr<Session> self);
  asio::awaitable<void> write_loop(std::shared_ptr<Session> self);
  asio::awaitable<void> keepalive_loop(std::shared_ptr<Session> self);
  void signal_write() { write_signal_.notify(); }
  /// Sends what nghttp2 has queued right now, from the caller's coroutine, when the write loop is
  /// idle and no nghttp2 call is on the stack; otherwise (or on backpressure) wakes the loop.
  void send_now();
  void consume(std::int32_t stream_id, std::size_t n);
  Stream* find(std::int32_t stream_id);
  void close_if_idle();
  /// Hands streams whose request headers completed during the last read to the handler, unless
  /// they were closed (reset) meanwhile: a stream reset in the same read never reaches it.
  void dispatch_ready();
  /// Charges one reset to the peer's budgets; when one is exhausted, GOAWAY(ENHANCE_YOUR_CALM).
  void charge_reset();
  /// A header block went over MAX_HEADER_LIST_SIZE: 431 (server) or reset (client), counted.
  void refuse_oversized(Stream& stream);
  /// Wakes writers waiting for window or for the connection's send budget.
  void wake_writers();
  void queue_sent(Stream& stream, std::size_t n);

  // nghttp2 callbacks (user_data = Session*).
  static ssize_t on_send(nghttp2_session*, const std::uint8_t* data, std::size_t len, int flags, void* user);
  static int on_send_data(nghttp2_session*, nghttp2_frame* frame, const std::uint8_t* framehd, std::size_t len,
                          nghttp2_data_source* source, void* user);
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name, std::size_t namelen,
                       const std::uint8_t* value, std::size_t valuelen, std::uint8_t flags, void* user);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int on_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* user);
  static int on_data_chunk(nghttp2_session*, std::uint8_t flags, std::int32_t stream_id, const std::uint8_t* data,
                           std::size_t len, void* user);
  static int on_stream_close(nghttp2_session*, std::int32_t stream_id, std::uint32_t error_code, void* user);
  static int on_invalid_frame(nghttp2_session*, const nghttp2_frame* frame, int lib_error, void* user);
  static ssize_t read_data(nghttp2_session*, std::int32_t stream_id, std::uint8_t* buf, std::size_t length,
                           std::uint32_t* data_flags, nghttp2_data_source* source, void* user);

  TlsSocket socket_;
  Role role_;
  Settings settings_;
  StreamHandler handler_;
  nghttp2_session* session_ = nullptr;
  std::unordered_map<std::int32_t, std::shared_ptr<Stream>> streams_;
  std::vector<std::shared_ptr<Stream>> ready_;  ///< request headers complete, handler not called yet
  std::vector<std::byte> out_;
  std::size_t queued_send_ = 0;  ///< bytes in all streams' send queues
  std::size_t queued_recv_ = 0;  ///< bytes in all streams' receive queues
  std::size_t blocked_writers_ = 0;  ///< write_all calls waiting for room
  TokenBucket reset_budget_;
  ResetCharge reset_charge_;
  bool calmed_down_ = false;
  net::Signal write_signal_;
  asio::steady_timer keepalive_timer_;
  std::chrono::steady_clock::time_point ping_sent_{};
  bool ping_outstanding_ = false;
  bool wrote_since_tick_ = false;
  bool writing_ = false;  ///< the write loop is inside socket_.write_all (it may be suspended there)
  bool in_nghttp2_ = false;  ///< an nghttp2 call (and so maybe our callbacks) is on the stack
  bool dead_ = false;
  bool goaway_ = false;
  bool draining_ = false;
  std::string close_reason_;
};

}  // namespace meshnode::h2
