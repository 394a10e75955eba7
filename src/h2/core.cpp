#include "h2/core.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <memory>

#include "telemetry/metrics.hpp"

namespace meshnode::h2 {
namespace {

using base::Errc;
using base::fail;

// Bytes of frames gathered before one socket write: large enough for full TLS records and few
// syscalls, small enough to keep latency and memory per connection low.
constexpr std::size_t kWriteBatch = 128 * 1024;
// What a stream may queue while the peer grants it no window: one small chunk, so a stalled
// stream holds little and its writer (the copy from the app) stops reading the app.
constexpr std::size_t kStalledChunk = 16 * 1024;

void count(telemetry::Counter* c) {
  if (c != nullptr) c->inc(1);
}

SessionCore* self_of(void* user) { return static_cast<SessionCore*>(user); }

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
// StreamCore

void StreamCore::discard_input() {
  discard_input_ = true;
  if (recv_.empty()) return;
  core_->queued_recv_ -= recv_.size();
  core_->consume(id_, recv_.size());
  recv_.clear();
}

void StreamCore::drop_send() noexcept {
  core_->queued_send_ -= send_.size();
  send_.clear();
  lent_ = {};
}

void StreamCore::consume_sent(std::size_t n) noexcept {
  if (send_.empty()) {
    lent_ = lent_.subspan(n);
    return;
  }
  send_.consume(n);
  core_->queued_send_ -= n;
}

std::size_t StreamCore::send_room() const noexcept {
  const SessionCore& s = *core_;
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

void StreamCore::queue_send(std::span<const std::byte> data) {
  send_.append(data);
  core_->queued_send_ += data.size();
  nghttp2_session_resume_data(core_->session_, id_);
}

std::size_t SessionCore::write_stream(StreamCore& stream, std::span<const std::byte> data) {
  if (stream.closed_ || stream.reset_ || stream.send_eof_) return 0;
  const std::size_t n = std::min(stream.send_room(), data.size());
  if (n > 0) stream.queue_send(data.first(n));
  return n;
}

void SessionCore::end_stream(StreamCore& stream) {
  if (stream.closed_ || stream.send_eof_) return;
  stream.send_eof_ = true;
  nghttp2_session_resume_data(stream.core_->session_, stream.id_);
}

std::size_t StreamCore::take_received(std::span<std::byte> buf) {
  std::size_t n = recv_.read(buf);
  core_->queued_recv_ -= n;
  core_->consume(id_, n);
  return n;
}

std::size_t StreamCore::take_received_blocks(net::OwnedBytes& out) {
  const std::size_t n = recv_.take_blocks(out);
  core_->queued_recv_ -= n;
  core_->consume(id_, n);
  return n;
}

std::string_view StreamCore::header(std::string_view name) const noexcept {
  for (const auto& h : headers_) {
    if (h.name == name) return h.value;
  }
  return {};
}

void StreamCore::on_closed(std::uint32_t error_code) {
  closed_ = true;
  // The reference reads RST_STREAM(NO_ERROR) and RST_STREAM(CANCEL) as EOF (research §2.1 "Data";
  // RFC 9113 §8.1 for NO_ERROR): a peer ending its side that way is a FIN for the app, even
  // before END_STREAM. Any other code is a reset of the tunnelled TCP connection.
  if (error_code == NGHTTP2_NO_ERROR || error_code == NGHTTP2_CANCEL) {
    recv_eof_ = true;
  } else {
    reset_ = true;
    refused_ = error_code == NGHTTP2_REFUSED_STREAM && !headers_done_;
  }
  // Nothing more can be sent on a closed stream.
  drop_send();
  wake();
}

// ---------------------------------------------------------------------------------------------
// SessionCore

SessionCore::SessionCore(Role role, Settings settings)
    : role_(role), settings_(settings), reset_budget_(settings_.reset_burst, settings_.resets_per_second) {}

SessionCore::~SessionCore() {
  if (session_ != nullptr) nghttp2_session_del(session_);
}

base::Result<void> SessionCore::init() {
  nghttp2_session_callbacks* raw_cb = nullptr;
  if (nghttp2_session_callbacks_new(&raw_cb) != 0) return fail(Errc::kInternal, "nghttp2 callbacks");
  std::unique_ptr<nghttp2_session_callbacks, CallbacksDeleter> cb(raw_cb);
  nghttp2_session_callbacks_set_send_callback(cb.get(), &SessionCore::on_send);
  nghttp2_session_callbacks_set_send_data_callback(cb.get(), &SessionCore::on_send_data);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb.get(), &SessionCore::on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb.get(), &SessionCore::on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb.get(), &SessionCore::on_frame_recv);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb.get(), &SessionCore::on_frame_send);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb.get(), &SessionCore::on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb.get(), &SessionCore::on_stream_close);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb.get(), &SessionCore::on_invalid_frame);

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

void SessionCore::consume(std::int32_t stream_id, std::size_t n) {
  if (dead_ || n == 0) return;
  nghttp2_session_consume_connection(session_, n);
  if (find(stream_id) != nullptr) nghttp2_session_consume_stream(session_, stream_id, n);
  // Most consumes queue nothing (nghttp2 sends WINDOW_UPDATE once half a window is consumed):
  // waking the writer for each of them would cost a scheduler hop per message for no frame.
  if (nghttp2_session_want_write(session_) != 0 || nghttp2_session_want_read(session_) == 0) signal_write();
}

void SessionCore::charge_reset() {
  if (role_ != Role::kServer || calmed_down_ || dead_) return;
  count(settings_.counters.stream_reset);
  const bool connection_ok = reset_budget_.take();
  // The identity's budget is charged only while the connection's lasts, so one reset costs one.
  if (connection_ok && (!reset_charge_ || reset_charge_())) return;
  calmed_down_ = true;
  count(settings_.counters.reset_budget_exceeded);
  nghttp2_session_terminate_session(session_, NGHTTP2_ENHANCE_YOUR_CALM);
  on_calm_down();
  signal_write();
}

base::Result<void> SessionCore::submit_response(StreamCore& stream, int status, const Headers& extra) {
  if (stream.closed_ || dead_) return fail(Errc::kClosed, "stream closed before response");
  std::string status_text = std::to_string(status);
  std::string status_name = ":status";
  std::vector<nghttp2_nv> nva;
  nva.push_back(make_nv(status_name, status_text));
  for (const auto& h : extra) nva.push_back(make_nv(h.name, h.value));
  nghttp2_data_provider provider{};
  provider.read_callback = &SessionCore::read_data;
  int rv = nghttp2_submit_response(session_, stream.id_, nva.data(), nva.size(), status == 200 ? &provider : nullptr);
  if (rv != 0) return fail(Errc::kProtocol, std::string("submit response: ") + nghttp2_strerror(rv));
  stream.response_pending_ = true;
  stream.responded_ = true;
  if (status != 200) {
    stream.send_eof_ = true;
    // A refused stream's request bytes (early data) are never read: their credit must come back,
    // or enough refused CONNECTs stall the whole connection.
    stream.discard_input();
    if (!stream.recv_eof_) stream.deferred_rst_ = NGHTTP2_NO_ERROR;
  }
  signal_write();
  return {};
}

void SessionCore::reset_stream(StreamCore& stream, std::uint32_t code) {
  if (!stream.closed_ && !dead_) {
    if (stream.response_pending_) {
      stream.deferred_rst_ = code;
    } else {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream.id_, code);
    }
    signal_write();
  }
  stream.reset_ = true;
  // Unread bytes still occupy the connection window: give it back so other streams keep flowing.
  stream.discard_input();
  stream.drop_send();
  stream.wake();
}

// ---------------------------------------------------------------------------------------------
// nghttp2 callbacks

ssize_t SessionCore::on_send(nghttp2_session*, const std::uint8_t* data, std::size_t len, int, void* user) {
  SessionCore* s = self_of(user);
  if (s->out_.size() >= kWriteBatch) return NGHTTP2_ERR_WOULDBLOCK;
  const auto* p = reinterpret_cast<const std::byte*>(data);
  s->out_.insert(s->out_.end(), p, p + len);
  return static_cast<ssize_t>(len);
}

ssize_t SessionCore::read_data(nghttp2_session* ng, std::int32_t stream_id, std::uint8_t*, std::size_t length,
                           std::uint32_t* data_flags, nghttp2_data_source*, void*) {
  // The stream's user data, not source->ptr: a client stream only exists after submit_request.
  auto* stream = static_cast<StreamCore*>(nghttp2_session_get_stream_user_data(ng, stream_id));
  if (stream == nullptr) return NGHTTP2_ERR_DEFERRED;
  // One frame never spans two queue blocks: its payload is copied from one contiguous run.
  std::size_t n = std::min(length, stream->send_front().size());
  if (n == 0) {
    if (stream->send_eof_) {
      *data_flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    return NGHTTP2_ERR_DEFERRED;
  }
  // Frame payload is copied straight from the stream's queue into the write batch (on_send_data).
  *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (stream->send_eof_ && n == stream->send_queued()) *data_flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

int SessionCore::on_send_data(nghttp2_session* ng, nghttp2_frame* frame, const std::uint8_t* framehd, std::size_t len,
                          nghttp2_data_source*, void* user) {
  SessionCore* s = self_of(user);
  auto* stream = static_cast<StreamCore*>(nghttp2_session_get_stream_user_data(ng, frame->hd.stream_id));
  if (stream == nullptr) return NGHTTP2_ERR_CALLBACK_FAILURE;
  // A frame sized by read_data can come back here after WOULDBLOCK, and reset() may have emptied
  // the queue in between: drop the frame (the stream is being reset anyway) instead of reading
  // bytes that are gone.
  if (stream->reset_ || stream->send_front().size() < len) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (s->out_.size() >= kWriteBatch) return NGHTTP2_ERR_WOULDBLOCK;
  const auto* hd = reinterpret_cast<const std::byte*>(framehd);
  s->out_.insert(s->out_.end(), hd, hd + 9);
  auto payload = stream->send_front().first(len);
  s->out_.insert(s->out_.end(), payload.begin(), payload.end());
  const bool was_over = s->queued_send_ >= s->settings_.connection_send_buffer;
  stream->consume_sent(len);
  s->data_sent_ += len;
  if (frame->data.padlen > 0) s->out_.insert(s->out_.end(), frame->data.padlen - 1, std::byte{0});
  stream->wake_writable();
  if (was_over && s->queued_send_ < s->settings_.connection_send_buffer) s->wake_writers();
  return 0;
}

int SessionCore::on_begin_headers(nghttp2_session* ng, const nghttp2_frame* frame, void* user) {
  SessionCore* s = self_of(user);
  if (s->role_ != Role::kServer || frame->hd.type != NGHTTP2_HEADERS ||
      frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  if (s->calmed_down_) return 0;  // GOAWAY(ENHANCE_YOUR_CALM) is on its way: serve nothing new
  (void)ng;
  s->begin_stream(frame->hd.stream_id);
  return 0;
}

int SessionCore::on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name, std::size_t namelen,
                       const std::uint8_t* value, std::size_t valuelen, std::uint8_t, void* user) {
  SessionCore* s = self_of(user);
  StreamCore* stream = s->find(frame->hd.stream_id);
  // Trailers (a second header block) carry nothing for a tunnel: not kept.
  if (stream == nullptr || frame->hd.type != NGHTTP2_HEADERS || stream->headers_done_) return 0;
  // SETTINGS_MAX_HEADER_LIST_SIZE is enforced on the decoded list (RFC 9113 §6.5.2): HPACK lets a
  // few bytes on the wire reference one large table entry thousands of times. Once over, the
  // stream is reset: nghttp2 sends RST_STREAM (charged to the peer in on_frame_send) and decodes
  // the rest of the block only to keep the HPACK state, without validating or handing us its
  // fields -- answering 431 after the block would cost validating all of it (an 800 MB bomb).
  stream->header_bytes_ += header_field_size(namelen, valuelen);
  if (stream->headers_too_large_) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (stream->header_bytes_ > s->settings_.max_header_list) {
    stream->headers_too_large_ = true;
    Headers().swap(stream->headers_);
    count(s->settings_.counters.header_list_too_large);
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  std::string n(reinterpret_cast<const char*>(name), namelen);
  std::string v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":status") {
    std::from_chars(v.data(), v.data() + v.size(), stream->status_);
  }
  stream->headers_.push_back(Header{std::move(n), std::move(v)});
  return 0;
}

int SessionCore::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  SessionCore* s = self_of(user);
  switch (frame->hd.type) {
    case NGHTTP2_PING:
      if ((frame->hd.flags & NGHTTP2_FLAG_ACK) == 0) return 0;
      if (std::memcmp(frame->ping.opaque_data, kDrainPing, sizeof(kDrainPing)) == 0) {
        s->on_drain_ping_acked();
      } else {
        s->ping_outstanding_ = false;
      }
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
      } else if (StreamCore* w = s->find(frame->hd.stream_id)) {
        w->wake_writable();
      }
      return 0;
    case NGHTTP2_RST_STREAM:
      // A reset before the response is the rapid-reset pattern (CVE-2023-44487): it costs us
      // work (maybe an upstream dial) and the peer nothing.
      if (StreamCore* r = s->find(frame->hd.stream_id); r != nullptr && !r->responded_) s->charge_reset();
      return 0;
    case NGHTTP2_HEADERS:
    case NGHTTP2_DATA:
      break;
    default:
      return 0;
  }
  StreamCore* stream = s->find(frame->hd.stream_id);
  if (stream == nullptr) return 0;
  if ((frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) stream->recv_eof_ = true;
  if (frame->hd.type == NGHTTP2_HEADERS && !stream->headers_done_) {
    stream->headers_done_ = true;
    if (stream->headers_too_large_) {
      stream->doomed_ = true;  // nghttp2 is resetting it
    } else if (s->role_ == Role::kServer) {
      s->stream_ready(*stream);
    }
  }
  stream->wake_readable();
  return 0;
}

int SessionCore::on_frame_send(nghttp2_session* ng, const nghttp2_frame* frame, void* user) {
  SessionCore* s = self_of(user);
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    // nghttp2 resets streams whose frames break the protocol (bad trailers, DATA on a closed
    // stream, flow-control violations): the peer caused that work ("MadeYouReset"). Our own
    // resets (CONNECT_ERROR: the app side failed; NO_ERROR: end of a refused stream) are not its.
    const std::uint32_t code = frame->rst_stream.error_code;
    if (code != NGHTTP2_NO_ERROR && code != NGHTTP2_CONNECT_ERROR) s->charge_reset();
    return 0;
  }
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  StreamCore* stream = s->find(frame->hd.stream_id);
  if (stream == nullptr) return 0;
  stream->wake_writable();  // a client stream's window exists from now on
  if (!stream->response_pending_) return 0;
  stream->response_pending_ = false;
  if (stream->deferred_rst_) {
    nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, frame->hd.stream_id, *stream->deferred_rst_);
    stream->deferred_rst_.reset();
  }
  return 0;
}

int SessionCore::on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t stream_id, const std::uint8_t* data,
                           std::size_t len, void* user) {
  SessionCore* s = self_of(user);
  StreamCore* stream = s->find(stream_id);
  if (stream == nullptr || stream->reset_ || stream->discard_input_) {
    // Nobody will read these bytes: release their flow-control credit at once.
    nghttp2_session_consume(s->session_, stream_id, len);
    s->signal_write();
    return 0;
  }
  stream->recv_.append({reinterpret_cast<const std::byte*>(data), len});
  s->queued_recv_ += len;
  stream->wake_readable();
  return 0;
}

int SessionCore::on_invalid_frame(nghttp2_session*, const nghttp2_frame* frame, int, void* user) {
  // nghttp2 answers the frame with RST_STREAM (sent later, then charged in on_frame_send); the
  // stream must not be handed to the handler meanwhile.
  if (StreamCore* stream = self_of(user)->find(frame->hd.stream_id)) stream->doomed_ = true;
  return 0;
}

int SessionCore::on_stream_close(nghttp2_session*, std::int32_t stream_id, std::uint32_t error_code, void* user) {
  self_of(user)->stream_closed(stream_id, error_code);
  return 0;
}

}  // namespace meshnode::h2
