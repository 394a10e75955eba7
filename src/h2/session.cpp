#include "h2/session.hpp"

#include "net/awaitable.hpp"
#include "telemetry/metrics.hpp"
#include <asio/post.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <utility>

namespace meshnode::h2 {
namespace {

using net::kNoThrow;

using base::Errc;
using base::fail;

constexpr std::size_t kReadBuffer = 32 * 1024;
// Plaintext bytes the reader hands to nghttp2 before it lets other coroutines run.
constexpr std::size_t kReadYield = 128 * 1024;
// A read of fewer plaintext bytes than a full TLS record (16 KiB) is a message, not bulk: its
// readers may run inline (see read_loop).
constexpr std::size_t kInlineWakeBelow = 16 * 1024;
nghttp2_nv make_nv(const std::string& name, const std::string& value) {
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
                    NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Stream

Stream::Stream(std::shared_ptr<Session> session, std::int32_t id)
    : StreamCore(session.get(), id), session_(std::move(session)) {}

Stream::~Stream() {
  // Bytes nobody will read still hold connection-window credit: return it (RFC 9113 §6.9).
  discard_input();
  drop_send();
}

asio::awaitable<base::Result<std::size_t>> Stream::read_some(std::span<std::byte> buf) {
  for (;;) {
    if (!recv_.empty()) co_return take_received(buf);
    if (reset_) co_return fail(Errc::kReset, "stream reset");
    if (recv_eof_) co_return std::size_t{0};
    if (closed_) co_return fail(Errc::kReset, "stream closed before END_STREAM");
    co_await readable_.wait();
  }
}

asio::awaitable<void> Stream::wait_readable() {
  // Not a coroutine (an idle tunnel waits here for hours; a frame of its own would live that
  // long). Not readable now, so a remembered wake-up (e.g. of the request or response HEADERS)
  // is stale. May still complete spuriously (an empty DATA frame, trailers): see ByteStream.
  if (readable_now()) return net::ready_now();
  readable_.clear();
  return readable_.wait();
}

asio::awaitable<base::Result<void>> Stream::write_all(std::span<const std::byte> data) {
  while (!data.empty()) {
    if (reset_ || closed_ || session_->dead_) co_return fail(Errc::kReset, "stream closed while writing");
    if (send_eof_) co_return fail(Errc::kClosed, "write after shutdown_write");
    // Back-pressure: a stream whose peer grants no window queues one small chunk and then waits,
    // so the copy feeding it stops reading its app (no unbounded buffering per stream or connection).
    const std::size_t room = send_room();
    if (room == 0) {
      ++session_->blocked_writers_;
      co_await writable_.wait();
      --session_->blocked_writers_;
      continue;
    }
    const std::size_t n = std::min(room, data.size());
    send_or_queue(data.first(n));
    data = data.subspan(n);
  }
  co_return base::Result<void>{};
}

void Stream::send_or_queue(std::span<const std::byte> data) {
  if (send_.empty() && session_->sends_inline()) {
    // Frame straight from the caller's buffer (issue 15: the queue copy was 2.3 % of a bulk
    // sender's CPU, and a 16 KiB block allocation per small message). Only what the peer's
    // window or the write batch leaves unsent is queued, before this returns.
    lent_ = data;
    nghttp2_session_resume_data(session_->session_, id_);
    session_->send_now();
    const auto rest = std::exchange(lent_, {});
    if (!rest.empty()) queue_send(rest);
  } else {
    queue_send(data);
    session_->send_now();
  }
}

asio::awaitable<base::Result<void>> Stream::shutdown_write() {
  if (reset_ || closed_ || session_->dead_) co_return fail(Errc::kReset, "stream closed before shutdown");
  if (!send_eof_) {
    send_eof_ = true;
    nghttp2_session_resume_data(session_->session_, id_);
    session_->send_now();
  }
  co_return base::Result<void>{};
}

void Stream::wake_readable() {
  if (wake_deferred_) return;  // already in this read's batch: wake_deferred() wakes it
  if (session_->defer_wakes_) {
    // Held by shared_ptr until woken. A stream that already left the table (closed by this very
    // read) is woken the ordinary way, now.
    auto it = session_->streams_.find(id_);
    if (it != session_->streams_.end() && it->second.get() == this) {
      wake_deferred_ = true;
      session_->deferred_wakes_.push_back(it->second);
      return;
    }
  }
  readable_.notify();
}

void Stream::reset() { session_->reset_stream(*this, NGHTTP2_CONNECT_ERROR); }

void Stream::reset_for_test(std::uint32_t error_code) {
  if (closed_ || session_->dead_) return;
  nghttp2_submit_rst_stream(session_->session_, NGHTTP2_FLAG_NONE, id_, error_code);
  session_->signal_write();
}

asio::awaitable<base::Result<int>> Stream::wait_response() {
  while (!headers_done_) {
    if (refused_) co_return fail(Errc::kReset, "stream refused by the peer (REFUSED_STREAM or GOAWAY below it)");
    if (reset_ || closed_ || session_->dead_) co_return fail(Errc::kReset, "stream closed before response");
    co_await readable_.wait();
  }
  if (status_ == 0) co_return fail(Errc::kProtocol, "response without a valid :status (or over MAX_HEADER_LIST_SIZE)");
  co_return status_;
}

base::Result<void> Stream::respond(int status, const Headers& extra) {
  auto ok = session_->submit_response(*this, status, extra);
  if (ok) session_->send_now();
  return ok;
}

// ---------------------------------------------------------------------------------------------
// Session

Session::Session(TlsSocket socket, Role role, Settings settings, StreamHandler handler)
    : SessionCore(role, settings),
      socket_(std::move(socket)),
      handler_(std::move(handler)),
      keepalive_timer_(socket_.get_executor()) {}

Session::~Session() = default;

base::Result<std::shared_ptr<Session>> Session::create(TlsSocket socket, Role role, Settings settings,
                                                       StreamHandler handler) {
  std::shared_ptr<Session> s(new Session(std::move(socket), role, settings, std::move(handler)));
  auto ok = s->init();
  if (!ok) return std::unexpected(ok.error());
  return s;
}

void Session::start(net::DrainScope& tasks) {
  auto ex = socket_.get_executor();
  auto self = shared_from_this();
  tasks.spawn(ex, read_loop(self), "h2 reader");
  tasks.spawn(ex, write_loop(self), "h2 writer");
  tasks.spawn(ex, keepalive_loop(self), "h2 keepalive");
}

std::uint32_t Session::peer_max_concurrent_streams() const noexcept {
  return nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
}

base::Result<std::shared_ptr<Stream>> Session::open_stream(const Headers& headers, std::span<const std::byte> first) {
  if (!accepting()) return fail(Errc::kClosed, "HTTP/2 connection is closing");
  std::vector<nghttp2_nv> nva;
  nva.reserve(headers.size());
  for (const auto& h : headers) nva.push_back(make_nv(h.name, h.value));
  // The Stream is bound as the stream's user data right after submit: nghttp2 does not call back
  // from inside submit_request, and read_data finds the Stream through that user data.
  nghttp2_data_provider provider{};
  provider.read_callback = &SessionCore::read_data;
  std::int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), &provider, nullptr);
  if (id < 0) return fail(Errc::kProtocol, std::string("submit request: ") + nghttp2_strerror(id));
  auto stream = std::make_shared<Stream>(shared_from_this(), id);
  streams_.emplace(id, stream);
  nghttp2_session_set_stream_user_data(session_, id, static_cast<StreamCore*>(stream.get()));
  // The first DATA goes in the same nghttp2_session_send as the HEADERS (a new stream always has
  // room for 16 KiB: send_room()).
  if (first.empty()) {
    send_now();
  } else {
    stream->send_or_queue(first);
  }
  return stream;
}

StreamCore* Session::find(std::int32_t stream_id) {
  auto it = streams_.find(stream_id);
  return it == streams_.end() ? nullptr : it->second.get();
}

void Session::begin_stream(std::int32_t stream_id) {
  auto stream = std::make_shared<Stream>(shared_from_this(), stream_id);
  nghttp2_session_set_stream_user_data(session_, stream_id, static_cast<StreamCore*>(stream.get()));
  streams_.emplace(stream_id, std::move(stream));
}

void Session::stream_ready(StreamCore& stream) {
  // Handed to the handler after this read is processed, if still open (dispatch_ready).
  if (auto it = streams_.find(stream.id()); it != streams_.end()) ready_.push_back(it->second);
}

void Session::stream_closed(std::int32_t stream_id, std::uint32_t code) {
  auto it = streams_.find(stream_id);
  if (it == streams_.end()) return;
  auto stream = std::move(it->second);
  streams_.erase(it);
  stream->on_closed(code);
  close_if_idle();
}

void Session::on_calm_down() {
  std::error_code ec;
  const auto peer = socket_.socket().remote_endpoint(ec);
  spdlog::warn("h2\treset budget exhausted\tpeer={}:{} open_streams={} action=goaway(ENHANCE_YOUR_CALM)",
               peer.address().to_string(), peer.port(), streams_.size());
}

void Session::dispatch_ready() {
  auto ready = std::move(ready_);
  ready_.clear();
  for (auto& stream : ready) {
    if (stream->closed_ || stream->doomed_ || dead_ || calmed_down_ || !handler_) continue;
    handler_(std::move(stream));
  }
}

void Session::wake_deferred(bool inline_now) {
  if (deferred_wakes_.empty()) return;
  waking_.swap(deferred_wakes_);
  for (auto& stream : waking_) {
    stream->wake_deferred_ = false;
    if (inline_now) stream->readable_.notify_inline();
    else stream->readable_.notify();
  }
  waking_.clear();
}

void Session::wake_writers() {
  if (blocked_writers_ == 0) return;
  for (auto& [id, stream] : streams_) stream->writable_.notify();
}

void Session::drain() {
  if (dead_ || draining_) return;
  draining_ = true;
  if (role_ == Role::kServer && !calmed_down_ && nghttp2_submit_shutdown_notice(session_) == 0 &&
      nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, kDrainPing) == 0) {
    // The final GOAWAY follows the PING's acknowledgement (on_drain_ping_acked). A peer that never
    // answers is ended by the keepalive's timeout, or by the drain deadline of whoever drains.
    signal_write();
    return;
  }
  submit_final_goaway();
}

void Session::goaway_now_for_test() {
  if (dead_ || draining_) return;
  draining_ = true;
  submit_final_goaway();
}

void Session::on_drain_ping_acked() {
  if (draining_) submit_final_goaway();
}

void Session::submit_final_goaway() {
  if (final_goaway_ || dead_) return;
  final_goaway_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                        NGHTTP2_NO_ERROR, nullptr, 0);
  close_if_idle();
  signal_write();
}

void Session::close_if_idle() {
  if (draining_ && final_goaway_ && streams_.empty() && !dead_) {
    nghttp2_session_terminate_session(session_, NGHTTP2_NO_ERROR);
    signal_write();
  }
}

void Session::abort(std::string_view reason) {
  if (dead_) return;
  dead_ = true;
  close_reason_ = reason;
  SPDLOG_DEBUG("h2 connection closed: {}", reason);
  socket_.close();
  keepalive_timer_.cancel();
  write_signal_.notify();
  auto streams = std::move(streams_);
  streams_.clear();
  for (auto& [id, stream] : streams) {
    stream->closed_ = true;
    stream->reset_ = true;
    stream->wake();
  }
}

asio::awaitable<void> Session::read_loop(std::shared_ptr<Session> /*keep_alive*/) {
  std::vector<std::uint8_t> buf(kReadBuffer);
  std::size_t since_yield = 0;
  while (!dead_) {
    if (since_yield >= kReadYield) {
      // Let the streams' consumers run: they copy what was just decrypted while it is still in
      // cache, and the queues (memory) stay small instead of filling the flow-control windows.
      since_yield = 0;
      co_await asio::post(socket_.get_executor(), asio::use_awaitable);
      if (dead_) break;
    }
    const auto into = std::as_writable_bytes(std::span(buf));
    auto n = co_await socket_.read_some(into);
    if (!n || *n == 0) {
      abort(!n ? n.error().message() : "peer closed the connection");
      break;
    }
    since_yield += *n;
    // Should anything below throw, the collected wake-ups are still delivered (a stream left
    // marked as deferred would ignore every later wake-up, its reader parked for ever).
    struct PostWakesOnUnwind {
      Session* session;
      ~PostWakesOnUnwind() {
        if (session != nullptr) session->wake_deferred(false);
      }
    } unwind_guard{this};
    in_nghttp2_ = true;
    defer_wakes_ = true;
    ssize_t rv = nghttp2_session_mem_recv(session_, buf.data(), *n);
    defer_wakes_ = false;
    in_nghttp2_ = false;
    if (rv < 0) {
      abort(std::string("HTTP/2 protocol error: ") + nghttp2_strerror(static_cast<int>(rv)));
      break;  // (unwind_guard posts the wake-ups this read collected)
    }
    dispatch_ready();
    // What the read produced (SETTINGS and PING acks, WINDOW_UPDATEs, RST_STREAMs) goes out now,
    // on this coroutine, instead of one scheduler hop later on the writer's.
    send_now();
    // A small read with the socket most likely empty (request/response traffic): the woken
    // readers run right here, so a message is forwarded before this reader's next read_some finds
    // nothing and queues its wait (a failed read and a scheduler pass, both on the message's
    // path). Bulk input (full records, or more waiting) is posted as before: the
    // readers run once this reader yields, and each forwards many records in one write.
    unwind_guard.session = nullptr;
    wake_deferred(*n < kInlineWakeBelow && socket_.input_drained());
  }
}

asio::awaitable<void> Session::write_loop(std::shared_ptr<Session> /*keep_alive*/) {
  while (!dead_) {
    in_nghttp2_ = true;
    int rv = nghttp2_session_send(session_);
    in_nghttp2_ = false;
    if (rv != 0) {
      abort(std::string("HTTP/2 send error: ") + nghttp2_strerror(rv));
      break;
    }
    if (out_.empty() && socket_.has_pending_output()) {
      // Ciphertext the socket did not take yet (send_now under backpressure, a KeyUpdate answer).
      writing_ = true;
      constexpr std::span<const std::byte> kNothing;  // only flushes what is queued
      auto flushed = co_await socket_.write_all(kNothing);
      writing_ = false;
      if (!flushed) {
        abort("write failed: " + flushed.error().message());
        break;
      }
      continue;
    }
    if (out_.empty()) {
      if (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) {
        abort("HTTP/2 connection finished");
        break;
      }
      co_await write_signal_.wait();
      continue;
    }
    writing_ = true;
    auto written = co_await socket_.write_all(out_);
    writing_ = false;
    out_.clear();
    if (!written) {
      abort("write failed: " + written.error().message());
      break;
    }
  }
}

void Session::send_now() {
  if (dead_ || writing_ || in_nghttp2_) {
    signal_write();
    return;
  }
  in_nghttp2_ = true;
  int rv = nghttp2_session_send(session_);
  in_nghttp2_ = false;
  if (rv != 0) {
    abort(std::string("HTTP/2 send error: ") + nghttp2_strerror(rv));
    return;
  }
  if (!out_.empty()) {
    if (!socket_.buffers_output()) {  // no output buffer to encrypt into: the write loop writes out_ itself
      signal_write();
      return;
    }
    auto sent = socket_.write_now(out_);
    if (!sent) {
      out_.clear();
      abort("write failed: " + sent.error().message());
      return;
    }
    out_.clear();
  }
  // The write loop takes over for backpressure, frames beyond one batch, and the end of the
  // connection (it notices when nghttp2 wants neither to read nor to write).
  if (socket_.has_pending_output() || nghttp2_session_want_write(session_) != 0 ||
      nghttp2_session_want_read(session_) == 0) {
    signal_write();
  }
}

asio::awaitable<void> Session::keepalive_loop(std::shared_ptr<Session> /*keep_alive*/) {
  while (!dead_) {
    keepalive_timer_.expires_after(settings_.ping_interval);
    co_await keepalive_timer_.async_wait(kNoThrow);
    if (dead_) break;
    // Buffers grow with traffic; a connection that sent no DATA for a whole interval gives them
    // back. Not "wrote nothing": the PING below is a write every interval, so a pooled connection
    // kept alive by it would hold its largest batch (two buffers of a few hundred KiB after a
    // bulk transfer) for good.
    if (data_sent_ == data_sent_at_tick_ && out_.empty()) {
      std::vector<std::byte>().swap(out_);
      socket_.release_idle_buffers();
    }
    data_sent_at_tick_ = data_sent_;
    auto now = std::chrono::steady_clock::now();
    if (ping_outstanding_) {
      if (now - ping_sent_ >= settings_.ping_timeout) {
        abort("keepalive: no PING acknowledgement within timeout");
        break;
      }
      continue;
    }
    nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr);
    ping_outstanding_ = true;
    ping_sent_ = now;
    signal_write();
  }
}

}  // namespace meshnode::h2
