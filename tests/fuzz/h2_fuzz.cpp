// libFuzzer target for the inbound HBONE server's HTTP/2 layer: bytes from a peer (RFC 9113 frames
// after the client preface) into a server nghttp2 session with our callbacks (h2::SessionCore, the
// same code h2::Session runs, without its Asio driver). Between input pieces the driver acts like
// the inbound proxy: it answers ready streams (200, or a refusal), reads what arrived, writes back,
// ends or resets streams, and sends what nghttp2 queued. No input may crash, read out of bounds,
// or break the accounting the memory bounds rest on.
//
// Input layout: byte 0 drives the handler (bits 0-1: answer 200 / 403 / 503 / reset; bit 2: echo
// what arrives; bit 3: end streams after echoing; bits 4-7: piece size = 64 << (bits % 8) bytes).
// The rest is what the peer sends; the client preface is prepended unless the input begins with it.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "h2/core.hpp"

namespace {

namespace h2 = meshnode::h2;
using h2::StreamCore;

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

class FuzzStream final : public h2::StreamCore {
 public:
  using StreamCore::StreamCore;
};

class FuzzServer final : public h2::SessionCore {
 public:
  explicit FuzzServer(h2::Settings settings) : SessionCore(h2::Role::kServer, settings) {}

  /// One piece of peer bytes; false once nghttp2 gave up on the connection.
  bool receive(std::span<const std::uint8_t> piece) {
    const ssize_t rv = nghttp2_session_mem_recv(session_, piece.data(), piece.size());
    return rv >= 0;
  }

  /// The inbound handler's part: answer new streams, move bytes, then flush nghttp2's output.
  void act(std::uint8_t mode) {
    auto ready = std::move(ready_);
    ready_.clear();
    for (std::int32_t id : ready) {
      StreamCore* s = find(id);
      if (s == nullptr || s->closed()) continue;
      FUZZ_CHECK(!s->headers().empty(), "a ready stream has its request headers");
      switch (mode & 3) {
        case 0: (void)submit_response(*s, 200, {}); break;
        case 1: (void)submit_response(*s, 403, {}); break;
        case 2: (void)submit_response(*s, 503, {}); break;
        default: reset_stream(*s, NGHTTP2_CONNECT_ERROR); break;
      }
    }
    std::vector<std::byte> buf(4096);
    for (auto& [id, s] : streams_) {
      const std::size_t n = read_stream(*s, buf);
      if ((mode & 4) != 0 && n > 0) (void)write_stream(*s, std::span(buf).first(n));
      if ((mode & 8) != 0) end_stream(*s);
    }
    flush();
    check_accounting();
  }

  void flush() {
    for (int i = 0; i < 64; ++i) {
      out_.clear();
      if (nghttp2_session_send(session_) != 0) return;
      if (out_.empty()) return;
    }
  }

 private:
  StreamCore* find(std::int32_t id) override {
    auto it = streams_.find(id);
    return it == streams_.end() ? nullptr : it->second.get();
  }
  void begin_stream(std::int32_t id) override {
    auto stream = std::make_unique<FuzzStream>(this, id);
    nghttp2_session_set_stream_user_data(session_, id, static_cast<StreamCore*>(stream.get()));
    streams_[id] = std::move(stream);
  }
  void stream_ready(StreamCore& stream) override { ready_.push_back(stream.id()); }
  void stream_closed(std::int32_t id, std::uint32_t code) override {
    auto it = streams_.find(id);
    if (it == streams_.end()) return;
    close_stream(*it->second, code);
    streams_.erase(it);
  }

  /// The session's byte counts are the sums of its streams' queues (what bounds its memory), and
  /// no stream keeps a header list over the advertised limit.
  void check_accounting() {
    std::size_t queued = 0;
    for (auto& [id, s] : streams_) {
      queued += s->send_queued();
      std::size_t header_bytes = 0;
      for (const auto& h : s->headers()) header_bytes += h2::header_field_size(h.name.size(), h.value.size());
      FUZZ_CHECK(header_bytes <= settings_.max_header_list, "kept header list within MAX_HEADER_LIST_SIZE");
    }
    FUZZ_CHECK(buffered_bytes() >= queued, "session counts every queued byte");
  }

  std::map<std::int32_t, std::unique_ptr<FuzzStream>> streams_;
  std::vector<std::int32_t> ready_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t mode = data[0];
  std::span<const std::uint8_t> input(data + 1, size - 1);
  h2::Settings settings;
  settings.reset_burst = 20;  // small, so inputs reach the GOAWAY(ENHANCE_YOUR_CALM) path
  settings.max_header_list = 4096;
  FuzzServer server(settings);
  FUZZ_CHECK(server.init().has_value(), "nghttp2 server session");
  server.flush();
  const std::string_view head(reinterpret_cast<const char*>(input.data()), std::min(input.size(), kPreface.size()));
  if (head != kPreface) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(kPreface.data());
    if (!server.receive({p, kPreface.size()})) return 0;
  }
  const std::size_t piece = std::size_t{64} << ((mode >> 4) % 8);
  while (!input.empty()) {
    const auto part = input.first(std::min(piece, input.size()));
    input = input.subspan(part.size());
    if (!server.receive(part)) break;
    server.act(mode);
  }
  server.act(mode);
  return 0;
}
