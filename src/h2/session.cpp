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

namespace meshnode::h2 {
namespace {

using net::kNoThrow;

using base::Errc;
using base::fail;

// Bytes of frames gathered before one socket write: large enough for full TLS records and few
// syscalls, small enough to keep latency and memory per connection low.
constexpr std::size_t kWriteBatch = 256 * 1024;
constexpr std::size_t kReadBuffer = 32 * 1024;
// Plaintext bytes the reader hands to nghttp2 before it lets other coroutines run.
constexpr std::size_t kReadYield = 128 * 1024;
// What a stream may queue while the peer grants it no window: one small chunk, so a stalled
// stream holds little and its writer (the copy from the app) stops reading the app.
constexpr std::size_t kStalledChunk = 16 * 1024;

void count(telemetry::Counter* c) {
  if (c != nullptr) c->inc(1);
}

Session* self_of(void* user) { return static_cast<Session*>(user); }

nghttp2_nv make_nv(const std::string& name, const std::string& value) {
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
                    NGHTTP2_NV_FLAG_NONE};
}

struct CallbacksDeleter {
  void operator()(nghttp2_session_callbacks* cb) const { nghttp2_session_callbacks_del(cb); }
};
struct OptionDeleter {
  void operator()(nghttp2_option* opt) const { nghttp2_option_del(opt); }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Stream

Stream::Stream(std::shared_ptr<Session> session, std::int32_t id)
    : session_(std::move(session)),
      id_(id),
      readable_(session_->socket_.get_executor()),
      writable_(session_->socket_.get_executor()) {}

Stream::~Stream() {
  // Bytes nobody will read still hold connection-window credit: return it (RFC 9113 §6.9).
  discard_input();
  drop_send();
}

void Stream::discard_input() {
  discard_input_ = true;
  if (recv_.empty()) return;
  session_->queued_recv_ -= recv_.size();
  session_->consume(id_, recv_.size());
  recv_.clear();
}

void Stream::drop_send() noexcept {
  session_->queued_send_ -= send_.size();
  send_.clear();
}

std::size_t Stream::send_room() const noexcept {
  const Session& s = *session_;
  const std::int32_t stream_window = nghttp2_session_get_stream_remote_window_size(s.session_, id_);
  const std::int32_t connection_window = nghttp2_session_get_remote_window_size(s.session_);
  const std::size_t window = static_cast<std::size_t>(std::max(0, std::min(stream_window, connection_window)));
  const std::size_t limit = std::min(s.settings_.stream_send_buffer, std::max(kStalledChunk, window));
  if (send_.size() >= limit) return 0;
  std::size_t room = limit - send_.size();
  if (s.queued_send_ >= s.settings_.connection_send_buffer) {
    // Over the connection's budget only an empty queue may take one small chunk.
    if (!send_.empty()) return 0;
    room = std::min(room, kStalledChunk);
  }
  return room;
}

std::string_view Stream::header(std::string_view name) const noexcept {
  for (const auto& h : headers_) {
    if (h.name == name) return h.value;
  }
  return {};
}

asio::awaitable<base::Result<std::size_t>> Stream::read_some(std::span<std::byte> buf) {
  for (;;) {
    if (!recv_.empty()) {
      std::size_t n = recv_.read(buf);
      session_->queued_recv_ -= n;
      session_->consume(id_, n);
      co_return n;
    }
    if (reset_) co_return fail(Errc::kReset, "stream reset");
    if (recv_eof_) co_return std::size_t{0};
    if (closed_) co_return fail(Errc::kReset, "stream closed before END_STREAM");
    co_await readable_.wait();
  }
}

asio::awaitable<void> Stream::wait_readable() {
  while (recv_.empty() && !reset_ && !recv_eof_ && !closed_) co_await readable_.wait();
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
    std::size_t n = std::min(room, data.size());
    send_.append(data.first(n));
    session_->queued_send_ += n;
    data = data.subspan(n);
    nghttp2_session_resume_data(session_->session_, id_);
    session_->send_now();
  }
  co_return base::Result<void>{};
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

void Stream::reset() {
  if (!closed_ && !session_->dead_) {
    if (response_pending_) {
      deferred_rst_ = NGHTTP2_CONNECT_ERROR;
    } else {
      nghttp2_submit_rst_stream(session_->session_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_CONNECT_ERROR);
    }
    session_->signal_write();
  }
  reset_ = true;
  // Unread bytes still occupy the connection window: give it back so other streams keep flowing.
  discard_input();
  drop_send();
  wake();
}

void Stream::reset_for_test(std::uint32_t error_code) {
  if (closed_ || session_->dead_) return;
  nghttp2_submit_rst_stream(session_->session_, NGHTTP2_FLAG_NONE, id_, error_code);
  session_->signal_write();
}

asio::awaitable<base::Result<int>> Stream::wait_response() {
  while (!headers_done_) {
    if (reset_ || closed_ || session_->dead_) co_return fail(Errc::kReset, "stream closed before response");
    co_await readable_.wait();
  }
  if (status_ == 0) co_return fail(Errc::kProtocol, "response without a valid :status (or over MAX_HEADER_LIST_SIZE)");
  co_return status_;
}

base::Result<void> Stream::respond(int status, const Headers& extra) {
  if (closed_ || session_->dead_) return fail(Errc::kClosed, "stream closed before response");
  std::string status_text = std::to_string(status);
  std::string status_name = ":status";
  std::vector<nghttp2_nv> nva;
  nva.push_back(make_nv(status_name, status_text));
  for (const auto& h : extra) nva.push_back(make_nv(h.name, h.value));
  nghttp2_data_provider provider{};
  provider.read_callback = &Session::read_data;
  int rv = nghttp2_submit_response(session_->session_, id_, nva.data(), nva.size(), status == 200 ? &provider : nullptr);
  if (rv != 0) return fail(Errc::kProtocol, std::string("submit response: ") + nghttp2_strerror(rv));
  response_pending_ = true;
  responded_ = true;
  if (status != 200) {
    send_eof_ = true;
    // A refused stream's request bytes (early data) are never read: their credit must come back,
    // or enough refused CONNECTs stall the whole connection.
    discard_input();
    if (!recv_eof_) deferred_rst_ = NGHTTP2_NO_ERROR;
  }
  session_->send_now();
  return {};
}

void Stream::on_closed(std::uint32_t error_code) {
  closed_ = true;
  // The reference reads RST_STREAM(NO_ERROR) and RST_STREAM(CANCEL) as EOF (research §2.1 "Data";
  // RFC 9113 §8.1 for NO_ERROR): a peer ending its side that way is a FIN for the app, even
  // before END_STREAM. Any other code is a reset of the tunnelled TCP connection.
  if (error_code == NGHTTP2_NO_ERROR || error_code == NGHTTP2_CANCEL) {
    recv_eof_ = true;
  } else {
    reset_ = true;
  }
  // Nothing more can be sent on a closed stream.
  drop_send();
  wake();
}

// ---------------------------------------------------------------------------------------------
// Session

Session::Session(TlsSocket socket, Role role, Settings settings, StreamHandler handler)
    : socket_(std::move(socket)),
      role_(role),
      settings_(settings),
      handler_(std::move(handler)),
      reset_budget_(settings_.reset_burst, settings_.resets_per_second),
      write_signal_(socket_.get_executor()),
      keepalive_timer_(socket_.get_executor()) {}

Session::~Session() {
  if (session_ != nullptr) nghttp2_session_del(session_);
}

base::Result<std::shared_ptr<Session>> Session::create(TlsSocket socket, Role role, Settings settings,
                                                       StreamHandler handler) {
  std::shared_ptr<Session> s(new Session(std::move(socket), role, settings, std::move(handler)));
  auto ok = s->init();
  if (!ok) return std::unexpected(ok.error());
  return s;
}

base::Result<void> Session::init() {
  nghttp2_session_callbacks* raw_cb = nullptr;
  if (nghttp2_session_callbacks_new(&raw_cb) != 0) return fail(Errc::kInternal, "nghttp2 callbacks");
  std::unique_ptr<nghttp2_session_callbacks, CallbacksDeleter> cb(raw_cb);
  nghttp2_session_callbacks_set_send_callback(cb.get(), &Session::on_send);
  nghttp2_session_callbacks_set_send_data_callback(cb.get(), &Session::on_send_data);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb.get(), &Session::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb.get(), &Session::on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb.get(), &Session::on_frame_recv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb.get(), &Session::on_frame_send);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb.get(), &Session::on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb.get(), &Session::on_stream_close);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb.get(), &Session::on_invalid_frame);

  nghttp2_option* raw_opt = nullptr;
  if (nghttp2_option_new(&raw_opt) != 0) return fail(Errc::kInternal, "nghttp2 options");
  std::unique_ptr<nghttp2_option, OptionDeleter> opt(raw_opt);
  // Window updates are sent when the application consumes bytes, not when they arrive: this is
  // what makes a slow reader push back on its own stream only.
  nghttp2_option_set_no_auto_window_update(opt.get(), 1);
  nghttp2_option_set_peer_max_concurrent_streams(opt.get(), 100);

  int rv = role_ == Role::kClient ? nghttp2_session_client_new2(&session_, cb.get(), this, opt.get())
                                  : nghttp2_session_server_new2(&session_, cb.get(), this, opt.get());
  if (rv != 0) return fail(Errc::kInternal, std::string("nghttp2 session: ") + nghttp2_strerror(rv));

  std::array<nghttp2_settings_entry, 4> iv{{
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, settings_.stream_window},
      {NGHTTP2_SETTINGS_MAX_FRAME_SIZE, settings_.max_frame},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, settings_.max_header_list},
      {role_ == Role::kServer ? NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS : NGHTTP2_SETTINGS_ENABLE_PUSH,
       role_ == Role::kServer ? settings_.max_concurrent_streams : 0u},
  }};
  rv = nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, iv.data(), iv.size());
  if (rv != 0) return fail(Errc::kInternal, std::string("nghttp2 settings: ") + nghttp2_strerror(rv));
  rv = nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                             static_cast<std::int32_t>(settings_.connection_window));
  if (rv != 0) return fail(Errc::kInternal, std::string("nghttp2 window: ") + nghttp2_strerror(rv));
  return {};
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

base::Result<std::shared_ptr<Stream>> Session::open_stream(const Headers& headers) {
  if (!accepting()) return fail(Errc::kClosed, "HTTP/2 connection is closing");
  std::vector<nghttp2_nv> nva;
  nva.reserve(headers.size());
  for (const auto& h : headers) nva.push_back(make_nv(h.name, h.value));
  // The Stream is bound as the stream's user data right after submit: nghttp2 does not call back
  // from inside submit_request, and read_data finds the Stream through that user data.
  nghttp2_data_provider provider{};
  provider.read_callback = &Session::read_data;
  std::int32_t id = nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(), &provider, nullptr);
  if (id < 0) return fail(Errc::kProtocol, std::string("submit request: ") + nghttp2_strerror(id));
  auto stream = std::make_shared<Stream>(shared_from_this(), id);
  streams_.emplace(id, stream);
  nghttp2_session_set_stream_user_data(session_, id, stream.get());
  send_now();
  return stream;
}

Stream* Session::find(std::int32_t stream_id) {
  auto it = streams_.find(stream_id);
  return it == streams_.end() ? nullptr : it->second.get();
}

void Session::consume(std::int32_t stream_id, std::size_t n) {
  if (dead_ || n == 0) return;
  nghttp2_session_consume_connection(session_, n);
  if (find(stream_id) != nullptr) nghttp2_session_consume_stream(session_, stream_id, n);
  signal_write();
}

void Session::dispatch_ready() {
  auto ready = std::move(ready_);
  ready_.clear();
  for (auto& stream : ready) {
    if (stream->closed_ || stream->doomed_ || dead_ || calmed_down_ || !handler_) continue;
    handler_(std::move(stream));
  }
}

void Session::charge_reset() {
  if (role_ != Role::kServer || calmed_down_ || dead_) return;
  count(settings_.counters.stream_reset);
  const bool connection_ok = reset_budget_.take();
  // The identity's budget is charged only while the connection's lasts, so one reset costs one.
  if (connection_ok && (!reset_charge_ || reset_charge_())) return;
  calmed_down_ = true;
  count(settings_.counters.reset_budget_exceeded);
  std::error_code ec;
  const auto peer = socket_.socket().remote_endpoint(ec);
  spdlog::warn("h2\treset budget exhausted\tpeer={}:{} open_streams={} action=goaway(ENHANCE_YOUR_CALM)",
               peer.address().to_string(), peer.port(), streams_.size());
  nghttp2_session_terminate_session(session_, NGHTTP2_ENHANCE_YOUR_CALM);
  signal_write();
}

void Session::refuse_oversized(Stream& stream) {
  count(settings_.counters.header_list_too_large);
  SPDLOG_DEBUG("h2 stream {}: header list of {} bytes over MAX_HEADER_LIST_SIZE {}", stream.id_,
               stream.header_bytes_, settings_.max_header_list);
  if (role_ == Role::kServer) {
    // 431 Request Header Fields Too Large (RFC 6585 §5), the answer RFC 9113 §10.5.1 suggests.
    (void)stream.respond(431);
  } else {
    stream.reset();
  }
  charge_reset();
}

void Session::wake_writers() {
  if (blocked_writers_ == 0) return;
  for (auto& [id, stream] : streams_) stream->writable_.notify();
}

void Session::drain() {
  if (dead_ || draining_) return;
  draining_ = true;
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(session_),
                        NGHTTP2_NO_ERROR, nullptr, 0);
  close_if_idle();
  signal_write();
}

void Session::close_if_idle() {
  if (draining_ && streams_.empty() && !dead_) {
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
    in_nghttp2_ = true;
    ssize_t rv = nghttp2_session_mem_recv(session_, buf.data(), *n);
    in_nghttp2_ = false;
    if (rv < 0) {
      abort(std::string("HTTP/2 protocol error: ") + nghttp2_strerror(static_cast<int>(rv)));
      break;
    }
    dispatch_ready();
    signal_write();
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
    wrote_since_tick_ = true;
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
    wrote_since_tick_ = true;
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
    // Buffers grow with traffic; a connection idle for a whole interval gives them back.
    if (!wrote_since_tick_ && out_.empty()) {
      std::vector<std::byte>().swap(out_);
      socket_.release_idle_buffers();
    }
    wrote_since_tick_ = false;
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

// ---------------------------------------------------------------------------------------------
// nghttp2 callbacks

ssize_t Session::on_send(nghttp2_session*, const std::uint8_t* data, std::size_t len, int, void* user) {
  Session* s = self_of(user);
  if (s->out_.size() >= kWriteBatch) return NGHTTP2_ERR_WOULDBLOCK;
  const auto* p = reinterpret_cast<const std::byte*>(data);
  s->out_.insert(s->out_.end(), p, p + len);
  return static_cast<ssize_t>(len);
}

ssize_t Session::read_data(nghttp2_session* ng, std::int32_t stream_id, std::uint8_t*, std::size_t length,
                           std::uint32_t* data_flags, nghttp2_data_source*, void*) {
  // The stream's user data, not source->ptr: a client stream only exists after submit_request.
  auto* stream = static_cast<Stream*>(nghttp2_session_get_stream_user_data(ng, stream_id));
  if (stream == nullptr) return NGHTTP2_ERR_DEFERRED;
  // One frame never spans two queue blocks: its payload is copied from one contiguous run.
  std::size_t n = std::min(length, stream->send_.front().size());
  if (n == 0) {
    if (stream->send_eof_) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    return NGHTTP2_ERR_DEFERRED;
  }
  // Frame payload is copied straight from the stream's queue into the write batch (on_send_data).
  *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (stream->send_eof_ && n == stream->send_.size()) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

int Session::on_send_data(nghttp2_session* ng, nghttp2_frame* frame, const std::uint8_t* framehd, std::size_t len,
                          nghttp2_data_source*, void* user) {
  Session* s = self_of(user);
  auto* stream = static_cast<Stream*>(nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id));
  if (stream == nullptr) return NGHTTP2_ERR_CALLBACK_FAILURE;
  // A frame sized by read_data can come back here after WOULDBLOCK, and reset() may have emptied
  // the queue in between: drop the frame (the stream is being reset anyway) instead of reading
  // bytes that are gone.
  if (stream->reset_ || stream->send_.front().size() < len) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (s->out_.size() >= kWriteBatch) return NGHTTP2_ERR_WOULDBLOCK;
  const auto* hd = reinterpret_cast<const std::byte*>(framehd);
  s->out_.insert(s->out_.end(), hd, hd + 9);
  auto payload = stream->send_.front().first(len);
  s->out_.insert(s->out_.end(), payload.begin(), payload.end());
  const bool was_over = s->queued_send_ >= s->settings_.connection_send_buffer;
  stream->send_.consume(len);
  s->queued_send_ -= len;
  if (frame->data.padlen > 0) s->out_.insert(s->out_.end(), frame->data.padlen - 1, std::byte{0});
  stream->writable_.notify();
  if (was_over && s->queued_send_ < s->settings_.connection_send_buffer) s->wake_writers();
  return 0;
}

int Session::on_begin_headers(nghttp2_session* ng, const nghttp2_frame* frame, void* user) {
  Session* s = self_of(user);
  if (s->role_ != Role::kServer || frame->hd.type != NGHTTP2_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  if (s->calmed_down_) return 0;  // GOAWAY(ENHANCE_YOUR_CALM) is on its way: serve nothing new
  auto stream = std::make_shared<Stream>(s->shared_from_this(), frame->hd.stream_id);
  nghttp2_session_set_stream_user_data(ng, frame->hd.stream_id, stream.get());
  s->streams_.emplace(frame->hd.stream_id, std::move(stream));
  return 0;
}

int Session::on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name, std::size_t namelen,
                       const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void* user) {
  Session* s = self_of(user);
  Stream* stream = s->find(frame->hd.stream_id);
  // Trailers (a second header block) carry nothing for a tunnel: not kept.
  if (stream == nullptr || frame->hd.type != NGHTTP2_HEADERS || stream->headers_done_) return 0;
  // SETTINGS_MAX_HEADER_LIST_SIZE is enforced on the decoded list (RFC 9113 §6.5.2): HPACK lets a
  // few bytes on the wire reference one large table entry thousands of times. Once over, nothing
  // more of the block is kept; the stream is answered 431 (or reset) when the block ends.
  stream->header_bytes_ += header_field_size(namelen, valuelen);
  if (stream->headers_too_large_) return 0;
  if (stream->header_bytes_ > s->settings_.max_header_list) {
    stream->headers_too_large_ = true;
    Headers().swap(stream->headers_);
    return 0;
  }
  std::string n(reinterpret_cast<const char*>(name), namelen);
  std::string v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":status") {
    std::from_chars(v.data(), v.data() + v.size(), stream->status_);
  }
  stream->headers_.push_back(Header{std::move(n), std::move(v)});
  return 0;
}

int Session::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  Session* s = self_of(user);
  switch (frame->hd.type) {
    case NGHTTP2_PING:
      if ((frame->hd.flags & NGHTTP2_FLAG_ACK) != 0) s->ping_outstanding_ = false;
      return 0;
    case NGHTTP2_GOAWAY:
      s->goaway_ = true;
      return 0;
    case NGHTTP2_SETTINGS:  // SETTINGS_INITIAL_WINDOW_SIZE may have opened every stream's window
      s->wake_writers();
      return 0;
    case NGHTTP2_WINDOW_UPDATE:
      if (frame->hd.stream_id == 0) {
        s->wake_writers();
      } else if (Stream* w = s->find(frame->hd.stream_id)) {
        w->writable_.notify();
      }
      return 0;
    case NGHTTP2_RST_STREAM:
      // A reset before the response is the rapid-reset pattern (CVE-2023-44487): it costs us
      // work (maybe an upstream dial) and the peer nothing.
      if (Stream* r = s->find(frame->hd.stream_id); r != nullptr && !r->responded_) s->charge_reset();
      return 0;
    case NGHTTP2_HEADERS:
    case NGHTTP2_DATA:
      break;
    default:
      return 0;
  }
  auto it = s->streams_.find(frame->hd.stream_id);
  if (it == s->streams_.end()) return 0;
  auto stream = it->second;
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) stream->recv_eof_ = true;
  if (frame->hd.type == NGHTTP2_HEADERS && !stream->headers_done_) {
    stream->headers_done_ = true;
    if (stream->headers_too_large_) {
      s->refuse_oversized(*stream);
    } else if (s->role_ == Role::kServer) {
      // Handed to the handler after this read is processed, if still open (dispatch_ready).
      s->ready_.push_back(stream);
    }
  }
  stream->readable_.notify();
  return 0;
}

int Session::on_frame_send(nghttp2_session* ng, const nghttp2_frame* frame, void* user) {
  Session* s = self_of(user);
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    // nghttp2 resets streams whose frames break the protocol (bad trailers, DATA on a closed
    // stream, flow-control violations): the peer caused that work ("MadeYouReset"). Our own
    // resets (CONNECT_ERROR: the app side failed; NO_ERROR: end of a refused stream) are not its.
    const std::uint32_t code = frame->rst_stream.error_code;
    if (code != NGHTTP2_NO_ERROR && code != NGHTTP2_CONNECT_ERROR) s->charge_reset();
    return 0;
  }
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  Stream* stream = s->find(frame->hd.stream_id);
  if (stream == nullptr) return 0;
  stream->writable_.notify();  // a client stream's window exists from now on
  if (!stream->response_pending_) return 0;
  stream->response_pending_ = false;
  if (stream->deferred_rst_) {
    nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, frame->hd.stream_id, *stream->deferred_rst_);
    stream->deferred_rst_.reset();
  }
  return 0;
}

int Session::on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t stream_id, const std::uint8_t* data,
                           std::size_t len, void* user) {
  Session* s = self_of(user);
  Stream* stream = s->find(stream_id);
  if (stream == nullptr || stream->reset_ || stream->discard_input_) {
    // Nobody will read these bytes: release their flow-control credit at once.
    nghttp2_session_consume(s->session_, stream_id, len);
    s->signal_write();
    return 0;
  }
  stream->recv_.append({reinterpret_cast<const std::byte*>(data), len});
  s->queued_recv_ += len;
  stream->readable_.notify();
  return 0;
}

int Session::on_invalid_frame(nghttp2_session*, const nghttp2_frame* frame, int, void* user) {
  // nghttp2 answers the frame with RST_STREAM (sent later, then charged in on_frame_send); the
  // stream must not be handed to the handler meanwhile.
  if (Stream* stream = self_of(user)->find(frame->hd.stream_id)) stream->doomed_ = true;
  return 0;
}

int Session::on_stream_close(nghttp2_session*, std::int32_t stream_id, std::uint32_t error_code, void* user) {
  Session* s = self_of(user);
  auto it = s->streams_.find(stream_id);
  if (it == s->streams_.end()) return 0;
  auto stream = std::move(it->second);
  s->streams_.erase(it);
  stream->on_closed(error_code);
  s->close_if_idle();
  return 0;
}

}  // namespace meshnode::h2
