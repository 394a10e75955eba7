#pragma once

// The nghttp2 side of an HBONE connection without any I/O: stream state, the nghttp2 callbacks
// and the protocol decisions taken in them (header-list limit, flow-control credit, send budget,
// reset budget). h2::Session drives it over a TLS socket with Asio; the HTTP/2 fuzz target drives
// it directly with bytes (no Asio in that build).

#include <nghttp2/nghttp2.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "h2/budget.hpp"
#include "h2/byte_queue.hpp"
#include "h2/header.hpp"

namespace meshnode::h2 {

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

enum class Role { kClient, kServer };

class SessionCore;
class Stream;

/// Protocol state of one HTTP/2 stream (headers, queues, how it ended). Owned by the session's
/// stream table; nghttp2's stream user data points here. Same thread as its session.
class StreamCore {
 public:
  StreamCore(SessionCore* core, std::int32_t id) : core_(core), id_(id) {}
  virtual ~StreamCore() = default;
  StreamCore(const StreamCore&) = delete;
  StreamCore& operator=(const StreamCore&) = delete;

  [[nodiscard]] std::int32_t id() const noexcept { return id_; }
  /// True once the stream is over in HTTP/2 (both END_STREAMs, or a reset, or the connection died):
  /// a server must not start work (dial an upstream) for it.
  [[nodiscard]] bool closed() const noexcept { return closed_; }
  /// True when the peer never processed this (client) stream: it closed with REFUSED_STREAM before
  /// any response. nghttp2 closes a stream so when the peer sends RST_STREAM(REFUSED_STREAM), when
  /// a GOAWAY arrives whose last-stream-id is below it, and when GOAWAY arrived before the request
  /// went out. RFC 9113 §8.7: such a request may be sent again on another connection.
  [[nodiscard]] bool refused() const noexcept { return refused_; }
  /// Bytes written but not yet handed to the connection (framed as DATA).
  [[nodiscard]] std::size_t send_queued() const noexcept { return send_.size() + lent_.size(); }
  /// Request headers (server side) or response headers (client side), pseudo-headers included.
  [[nodiscard]] const Headers& headers() const noexcept { return headers_; }
  /// Value of the first header named `name` (lowercase), empty if absent.
  [[nodiscard]] std::string_view header(std::string_view name) const noexcept;
  /// Frees the headers once read: a CONNECT tunnel lives for hours, its request or response
  /// headers (~700 bytes) are read once at the start (issue 15, idle memory).
  void release_headers() noexcept { Headers().swap(headers_); }

 protected:
  friend class SessionCore;
  friend class Stream;
  /// Wake whoever waits to read / to write this stream (no-op without waiters).
  virtual void wake_readable() {}
  virtual void wake_writable() {}
  void wake() {
    wake_readable();
    wake_writable();
  }
  /// nghttp2 closed the stream with `error_code`: NO_ERROR and CANCEL are EOF (research §2.1
  /// "Data": the reference reads both as a clean end), any other code is a reset.
  void on_closed(std::uint32_t error_code);
  /// Bytes a writer may queue now: what the peer's windows let us send (at least one small
  /// chunk, at most stream_send_buffer) minus what is queued, within the connection's budget.
  [[nodiscard]] std::size_t send_room() const noexcept;
  /// From now on nobody reads: unread bytes and later DATA give their credit back at once.
  void discard_input();
  /// Empties the send queue (a reset or closed stream sends nothing more).
  void drop_send() noexcept;
  /// Queues `data` for sending (the caller checked send_room()).
  void queue_send(std::span<const std::byte> data);
  /// The bytes the next DATA frame takes its payload from: the head of the send queue, or of the
  /// lent span once the queue is empty; at most ByteQueue::kBlockSize of them, so a frame sized
  /// from lent bytes still fits the queue's first block if the rest is queued before it is sent.
  [[nodiscard]] std::span<const std::byte> send_front() const noexcept {
    if (!send_.empty()) return send_.front();
    return lent_.first(std::min(lent_.size(), ByteQueue::kBlockSize));
  }
  /// Drops `n` framed bytes from the head of what send_front() showed.
  void consume_sent(std::size_t n) noexcept;
  /// Hands up to buf.size() received bytes to the reader and returns their credit.
  std::size_t take_received(std::span<std::byte> buf);
  /// As take_received, but hands over the receive queue's blocks themselves (no copy), as many
  /// as `out` has room for; returns the bytes.
  std::size_t take_received_blocks(net::OwnedBytes& out);

  SessionCore* core_;
  std::int32_t id_;
  Headers headers_;
  int status_ = 0;
  bool headers_done_ = false;
  ByteQueue recv_;
  bool recv_eof_ = false;
  ByteQueue send_;
  /// A writer's own bytes, framed without copying them into send_ first. Set by Stream::write_all
  /// only around one synchronous nghttp2_session_send while send_ is empty; whatever is left is
  /// then queued into send_ (copied) before the writer's buffer can change.
  std::span<const std::byte> lent_;
  bool send_eof_ = false;
  bool closed_ = false;
  bool reset_ = false;
  bool refused_ = false;
  std::size_t header_bytes_ = 0;    ///< RFC 9113 §6.5.2 size of the header block being received
  bool headers_too_large_ = false;
  bool responded_ = false;          ///< server: the response was submitted
  bool discard_input_ = false;      ///< nobody will read: incoming DATA is consumed on arrival
  bool doomed_ = false;             ///< nghttp2 is resetting it for the peer's invalid frames
  // Server: response HEADERS submitted but not yet on the wire. nghttp2 marks a stream CLOSING as
  // soon as RST_STREAM is submitted and then drops its queued HEADERS, so an RST_STREAM wanted
  // meanwhile (non-200 response, or reset right after the response) waits in deferred_rst_ until
  // on_frame_send saw the HEADERS go out.
  bool response_pending_ = false;
  std::optional<std::uint32_t> deferred_rst_;
};

/// The nghttp2 session of one HTTP/2 connection and its callbacks. Frames go out through out_
/// (the driver writes and clears it; on_send stops at one batch); received bytes go in through
/// nghttp2_session_mem_recv. The driver supplies the stream table and the wake-ups (hooks below).
/// Single-threaded.
class SessionCore {
 public:
  /// Server: a second budget consulted on every charged reset after the connection's own (the
  /// peer identity's, across its connections); returning false ends the connection as if the
  /// connection's budget were exhausted. Set before the first bytes are received.
  using ResetCharge = std::function<bool()>;

  SessionCore(Role role, Settings settings);
  virtual ~SessionCore();
  SessionCore(const SessionCore&) = delete;
  SessionCore& operator=(const SessionCore&) = delete;

  /// Creates the nghttp2 session and queues our SETTINGS and connection WINDOW_UPDATE.
  /// Errc::kInternal if nghttp2 refuses.
  [[nodiscard]] base::Result<void> init();

  void set_reset_charge(ResetCharge charge) { reset_charge_ = std::move(charge); }
  /// Bytes the session holds for its streams: queued for sending plus received and unread.
  [[nodiscard]] std::size_t buffered_bytes() const noexcept { return queued_send_ + queued_recv_; }
  /// write_all calls waiting for room (back-pressure from the peer's windows or the send budget).
  [[nodiscard]] std::size_t blocked_writers() const noexcept { return blocked_writers_; }
  /// True once the peer exhausted its reset budget and was sent GOAWAY(ENHANCE_YOUR_CALM).
  [[nodiscard]] bool calmed_down() const noexcept { return calmed_down_; }

  /// Server: submits the response for `stream`; 200 opens its DATA source, any other status ends
  /// it (END_STREAM, RST_STREAM(NO_ERROR) if the client still sends) and discards its input.
  /// Errc::kClosed if the stream is over, Errc::kProtocol if nghttp2 refuses.
  base::Result<void> submit_response(StreamCore& stream, int status, const Headers& extra);
  /// Resets `stream` with `code` (deferred until its response HEADERS left), discards its queues
  /// and wakes its waiters.
  void reset_stream(StreamCore& stream, std::uint32_t code);

  /// DATA source callback for requests and 200 responses (reads the stream's send queue).
  static ssize_t read_data(nghttp2_session*, std::int32_t stream_id, std::uint8_t* buf, std::size_t length,
                           std::uint32_t* data_flags, nghttp2_data_source* source, void* user);

 protected:
  friend class StreamCore;
  friend class Stream;

  // Hooks for the driver.
  /// The stream with `id`, or null.
  virtual StreamCore* find(std::int32_t id) = 0;
  /// Server: a request stream begins; create and register it (find() returns it from now on) and
  /// bind it as nghttp2's stream user data.
  virtual void begin_stream(std::int32_t id) = 0;
  /// Server: the request headers of `stream` are complete (called inside nghttp2).
  virtual void stream_ready(StreamCore& stream) = 0;
  /// nghttp2 closed the stream: remove it from the table and call on_closed(code).
  virtual void stream_closed(std::int32_t id, std::uint32_t code) = 0;
  /// Frames are queued: get the writer going.
  virtual void signal_write() {}
  /// Wakes writers waiting for window or for the connection's send budget.
  virtual void wake_writers() {}
  /// The reset budget ran out (for the log); GOAWAY is already queued.
  virtual void on_calm_down() {}
  /// The peer acknowledged the PING sent with kDrainPing: every stream it opened before it saw our
  /// shutdown notice has reached us.
  virtual void on_drain_ping_acked() {}

  /// Opaque data of the PING that follows a server's shutdown notice (Session::drain).
  static constexpr std::uint8_t kDrainPing[8] = {'m', 'n', '-', 'd', 'r', 'a', 'i', 'n'};

  // For drivers other than Session (the fuzz target): what a stream's reader and writer do.
  /// Closes `stream` as nghttp2 reported (from stream_closed()).
  static void close_stream(StreamCore& stream, std::uint32_t code) { stream.on_closed(code); }
  /// Reads received bytes (returns their credit); 0 when none are buffered.
  static std::size_t read_stream(StreamCore& stream, std::span<std::byte> buf) { return stream.take_received(buf); }
  /// Queues as much of `data` as send_room() allows; returns the count.
  static std::size_t write_stream(StreamCore& stream, std::span<const std::byte> data);
  /// Marks the send side finished (END_STREAM once the queue is sent).
  static void end_stream(StreamCore& stream);

  void consume(std::int32_t stream_id, std::size_t n);
  /// Charges one reset to the peer's budgets; when one is exhausted, GOAWAY(ENHANCE_YOUR_CALM).
  void charge_reset();

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

  Role role_;
  Settings settings_;
  nghttp2_session* session_ = nullptr;
  std::vector<std::byte> out_;       ///< frames ready for the socket
  std::size_t queued_send_ = 0;      ///< bytes in all streams' send queues
  std::uint64_t data_sent_ = 0;      ///< DATA payload bytes written to out_ so far (on_send_data)
  std::size_t queued_recv_ = 0;      ///< bytes in all streams' receive queues
  std::size_t blocked_writers_ = 0;  ///< writers waiting for room
  TokenBucket reset_budget_;
  ResetCharge reset_charge_;
  bool calmed_down_ = false;
  bool ping_outstanding_ = false;
  bool dead_ = false;
  bool goaway_ = false;
};

}  // namespace meshnode::h2
