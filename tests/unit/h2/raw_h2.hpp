#pragma once

// A hand-written HTTP/2 peer for the tests that must break the protocol on purpose (an attacker
// holding a valid mesh certificate): frames are built byte by byte (RFC 9113 §4.1, §6), header
// blocks with a minimal HPACK encoder (RFC 7541: literals without Huffman, indexed references),
// and what the server sends back is split into frames, its header blocks decoded by nghttp2's own
// HPACK inflater. Pure helpers first, then the TLS client used against HboneLoopback.

#include <nghttp2/nghttp2.h>

#include <asio/ssl/stream.hpp>
#include <asio/write.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/deadline.hpp"
#include "unit/h2/loopback.hpp"

namespace meshnode::testing::raw {

enum FrameType : std::uint8_t {
  kData = 0,
  kHeaders = 1,
  kRstStream = 3,
  kSettings = 4,
  kPing = 6,
  kGoaway = 7,
  kWindowUpdate = 8,
  kContinuation = 9,
};
constexpr std::uint8_t kEndStream = 0x1;
constexpr std::uint8_t kAck = 0x1;
constexpr std::uint8_t kEndHeaders = 0x4;

inline void put_u32(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<char>((v >> shift) & 0xff));
}

/// One frame: 9-byte header (length, type, flags, stream id) + payload (RFC 9113 §4.1).
inline std::string frame(std::uint8_t type, std::uint8_t flags, std::uint32_t stream, std::string_view payload) {
  std::string out;
  const auto len = static_cast<std::uint32_t>(payload.size());
  out.push_back(static_cast<char>((len >> 16) & 0xff));
  out.push_back(static_cast<char>((len >> 8) & 0xff));
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(flags));
  put_u32(out, stream & 0x7fffffff);
  out.append(payload);
  return out;
}

/// SETTINGS with {identifier, value} pairs (RFC 9113 §6.5.1).
inline std::string settings(const std::vector<std::pair<std::uint16_t, std::uint32_t>>& entries = {}) {
  std::string payload;
  for (auto [id, value] : entries) {
    payload.push_back(static_cast<char>(id >> 8));
    payload.push_back(static_cast<char>(id & 0xff));
    put_u32(payload, value);
  }
  return frame(kSettings, 0, 0, payload);
}

/// Client connection preface + the given SETTINGS (RFC 9113 §3.4).
inline std::string preface(const std::vector<std::pair<std::uint16_t, std::uint32_t>>& entries = {}) {
  return std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") + settings(entries);
}

inline std::string rst_stream(std::uint32_t stream, std::uint32_t code) {
  std::string payload;
  put_u32(payload, code);
  return frame(kRstStream, 0, stream, payload);
}

inline std::string window_update(std::uint32_t stream, std::uint32_t increment) {
  std::string payload;
  put_u32(payload, increment);
  return frame(kWindowUpdate, 0, stream, payload);
}

inline std::string ping(std::uint8_t flags = 0) { return frame(kPing, flags, 0, std::string(8, '\x07')); }

inline std::string data(std::uint32_t stream, std::string_view payload, std::uint8_t flags = 0) {
  return frame(kData, flags, stream, payload);
}

/// HPACK integer with an N-bit prefix (RFC 7541 §5.1); `first` holds the pattern bits above it.
inline void hpack_int(std::string& out, std::uint8_t first, int prefix_bits, std::size_t value) {
  const std::size_t max_prefix = (1u << prefix_bits) - 1;
  if (value < max_prefix) {
    out.push_back(static_cast<char>(first | value));
    return;
  }
  out.push_back(static_cast<char>(first | max_prefix));
  value -= max_prefix;
  while (value >= 128) {
    out.push_back(static_cast<char>((value % 128) + 128));
    value /= 128;
  }
  out.push_back(static_cast<char>(value));
}

/// Literal header field with a new name (RFC 7541 §6.2): not indexed (0x00) or with incremental
/// indexing (0x40: the field enters the dynamic table, index 62 for the newest).
inline std::string literal(std::string_view name, std::string_view value, bool index = false) {
  std::string out;
  out.push_back(static_cast<char>(index ? 0x40 : 0x00));
  hpack_int(out, 0, 7, name.size());
  out.append(name);
  hpack_int(out, 0, 7, value.size());
  out.append(value);
  return out;
}

/// Indexed header field (RFC 7541 §6.1): one byte or so that expands to a whole table entry.
inline std::string indexed(std::size_t index) {
  std::string out;
  hpack_int(out, 0x80, 7, index);
  return out;
}

/// The header block of an HBONE CONNECT (research §2.1) plus `extra` encoded fields.
inline std::string connect_block(std::string_view authority = "127.0.0.1:8080", std::string_view extra = "") {
  return literal(":method", "CONNECT") + literal(":authority", authority) + std::string(extra);
}

/// A header block as HEADERS + CONTINUATION frames of at most `max_frame` bytes each.
inline std::string headers(std::uint32_t stream, std::string_view block, std::uint8_t flags = 0,
                           std::size_t max_frame = 16384) {
  std::string out;
  std::size_t off = 0;
  bool first = true;
  do {
    const std::size_t n = std::min(max_frame, block.size() - off);
    const bool last = off + n == block.size();
    const std::uint8_t f = static_cast<std::uint8_t>((first ? flags : 0) | (last ? kEndHeaders : 0));
    out += frame(first ? kHeaders : kContinuation, f, stream, block.substr(off, n));
    off += n;
    first = false;
  } while (off < block.size());
  return out;
}

struct Frame {
  std::uint8_t type = 0;
  std::uint8_t flags = 0;
  std::uint32_t stream = 0;
  std::string payload;

  [[nodiscard]] std::uint32_t u32_at(std::size_t off) const {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<std::uint8_t>(payload.at(off + i));
    return v;
  }
};

/// Splits a byte stream into frames.
class FrameSplitter {
 public:
  void feed(std::string_view bytes) { buf_.append(bytes); }
  std::optional<Frame> next() {
    if (buf_.size() < 9) return std::nullopt;
    const auto b = [&](std::size_t i) { return static_cast<std::uint8_t>(buf_[i]); };
    const std::size_t len = (std::size_t{b(0)} << 16) | (std::size_t{b(1)} << 8) | b(2);
    if (buf_.size() < 9 + len) return std::nullopt;
    Frame f;
    f.type = b(3);
    f.flags = b(4);
    f.stream = ((std::uint32_t{b(5)} << 24) | (std::uint32_t{b(6)} << 16) | (std::uint32_t{b(7)} << 8) | b(8)) &
               0x7fffffff;
    f.payload = buf_.substr(9, len);
    buf_.erase(0, 9 + len);
    return f;
  }

 private:
  std::string buf_;
};

/// Decodes the server's header blocks (one HPACK context per connection) with nghttp2's inflater.
class HeaderDecoder {
 public:
  HeaderDecoder() { nghttp2_hd_inflate_new(&inflater_); }
  ~HeaderDecoder() { nghttp2_hd_inflate_del(inflater_); }
  HeaderDecoder(const HeaderDecoder&) = delete;
  HeaderDecoder& operator=(const HeaderDecoder&) = delete;

  /// The fields of one complete header block (padding and priority already stripped).
  std::vector<std::pair<std::string, std::string>> decode(std::string_view block) {
    std::vector<std::pair<std::string, std::string>> out;
    const auto* in = reinterpret_cast<const std::uint8_t*>(block.data());
    std::size_t left = block.size();
    for (;;) {
      nghttp2_nv nv;
      int flags = 0;
      const ssize_t rv = nghttp2_hd_inflate_hd2(inflater_, &nv, &flags, in, left, 1);
      if (rv < 0) break;
      in += rv;
      left -= static_cast<std::size_t>(rv);
      if ((flags & NGHTTP2_HD_INFLATE_EMIT) != 0) {
        out.emplace_back(std::string(reinterpret_cast<const char*>(nv.name), nv.namelen),
                         std::string(reinterpret_cast<const char*>(nv.value), nv.valuelen));
      }
      if ((flags & NGHTTP2_HD_INFLATE_FINAL) != 0) {
        nghttp2_hd_inflate_end_headers(inflater_);
        break;
      }
      if (rv == 0 && left == 0) break;
    }
    return out;
  }

 private:
  nghttp2_hd_inflater* inflater_ = nullptr;
};

/// What the server sent, as the tests look at it.
struct Seen {
  std::vector<Frame> frames;
  std::map<std::uint32_t, int> status;            ///< :status by stream
  std::map<std::uint32_t, std::uint32_t> resets;  ///< RST_STREAM error code by stream
  std::map<std::uint32_t, std::size_t> data;      ///< DATA payload bytes by stream
  std::map<std::uint32_t, std::uint64_t> window_updates;  ///< WINDOW_UPDATE increments by stream (0: connection)
  std::optional<std::uint32_t> goaway_code;
  std::uint32_t goaway_last_stream = 0;
  bool closed = false;  ///< the server closed the connection
};

/// A TLS 1.3 client with the mesh client certificate (kClientId) that writes raw HTTP/2 bytes to
/// the loopback server and records what comes back. Only the server's header blocks are decoded.
/// Its SETTINGS are never acknowledged: the server keeps its defaults for what it receives (16 KiB
/// frames). One send and one read_until may run at the same time.
class RawClient {
 public:
  explicit RawClient(HboneLoopback& lo) : lo_(lo) {}

  asio::awaitable<bool> connect() {
    auto identity = lo_.certs().get(kClientId);
    if (!identity) co_return false;
    asio::ip::tcp::socket socket(lo_.io());
    const asio::ip::tcp::endpoint server(asio::ip::make_address("127.0.0.1"), lo_.port());
    auto [ec] = co_await socket.async_connect(server, net::kNoThrow);
    if (ec) co_return false;
    tls_ = std::make_unique<Tls>(std::move(socket), SSL_new((*identity)->client_ctx.get()));
    auto [hec] = co_await tls_->async_handshake(asio::ssl::stream_base::client, net::kNoThrow);
    co_return !hec;
  }

  asio::awaitable<bool> send(std::string bytes) {
    const auto buf = asio::buffer(bytes);
    auto [ec, n] = co_await asio::async_write(*tls_, buf, net::kNoThrow);
    co_return !ec;
  }

  /// Reads frames until `done(seen)` holds, the server closes the connection, or `limit` passes.
  /// @returns whether `done` held.
  asio::awaitable<bool> read_until(std::function<bool(const Seen&)> done, std::chrono::steady_clock::duration limit) {
    auto ex = co_await asio::this_coro::executor;
    net::Deadline deadline(ex, limit, [this] { tls_->lowest_layer().close(); });
    std::string buf(64 * 1024, '\0');
    const auto into = asio::buffer(buf);
    while (!done(seen) && !seen.closed) {
      auto [ec, n] = co_await tls_->async_read_some(into, net::kNoThrow);
      if (ec) {
        seen.closed = !deadline.expired();
        break;
      }
      splitter_.feed(std::string_view(buf.data(), n));
      while (auto f = splitter_.next()) {
        if (!on_frame(std::move(*f))) co_return false;
      }
    }
    co_return done(seen);
  }

  Seen seen;

 private:
  using Tls = asio::ssl::stream<asio::ip::tcp::socket>;

  bool on_frame(Frame f) {
    switch (f.type) {
      case kHeaders:
      case kContinuation: {
        std::string_view body = f.payload;
        if (f.type == kHeaders) {
          std::size_t pad = 0;
          if ((f.flags & 0x8) != 0) pad = static_cast<std::uint8_t>(body[0]), body.remove_prefix(1);
          if ((f.flags & 0x20) != 0) body.remove_prefix(5);
          body.remove_suffix(pad);
          block_.clear();
        }
        block_.append(body);
        if ((f.flags & kEndHeaders) != 0) {
          for (auto& [name, value] : decoder_.decode(block_)) {
            if (name == ":status") seen.status[f.stream] = std::stoi(value);
          }
        }
        break;
      }
      case kRstStream:
        seen.resets[f.stream] = f.u32_at(0);
        break;
      case kData:
        seen.data[f.stream] += f.payload.size();
        break;
      case kWindowUpdate:
        seen.window_updates[f.stream] += f.u32_at(0) & 0x7fffffff;
        break;
      case kGoaway:
        seen.goaway_last_stream = f.u32_at(0) & 0x7fffffff;
        seen.goaway_code = f.u32_at(4);
        break;
      default:
        break;
    }
    seen.frames.push_back(std::move(f));
    return true;
  }

  HboneLoopback& lo_;
  std::unique_ptr<Tls> tls_;
  FrameSplitter splitter_;
  HeaderDecoder decoder_;
  std::string block_;
};

}  // namespace meshnode::testing::raw
