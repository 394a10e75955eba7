// DeltaDiscoveryResponse read in place (see response.hpp): the initial push of a large cluster is
// tens of MB, and parsing it into protobuf messages copied every payload once more and built two
// objects per resource before apply() read a field (xDS apply benchmark, issue #12).

#include "xds/response.hpp"

#include "discovery.pb.h"
#include "xds/wire.hpp"

namespace meshnode::xds {
namespace {

using wire::kLen;
using wire::Reader;
using wire::reader_of;

// The protobuf runtime reads tags and lengths as 32-bit varints of at most 5 bytes; longer
// (non-minimal) encodings, which it refuses, are left to it.
bool short_varint(Reader& r, std::uint64_t& out) {
  const char* start = r.p;
  return r.varint(out) && r.p - start <= 5 && out <= 0x7fffffffu;
}

bool next_tag(Reader& r, std::uint32_t& field, std::uint32_t& type) {
  std::uint64_t t = 0;
  if (!short_varint(r, t)) return false;
  field = static_cast<std::uint32_t>(t >> 3);
  type = static_cast<std::uint32_t>(t & 7);
  return field != 0;
}

bool len_field(Reader& r, std::string_view& out) {
  std::uint64_t n = 0;
  if (!short_varint(r, n) || n > static_cast<std::uint64_t>(r.end - r.p)) return false;
  out = std::string_view(r.p, static_cast<std::size_t>(n));
  r.p += n;
  return true;
}

bool ascii_field(Reader& r, std::string_view& out) { return len_field(r, out) && wire::ascii(out); }

// A field the proto does not define (or one it defines under another wire type, which protobuf
// also keeps as unknown). A 10-byte varint is left to protobuf: whether it keeps the bits past
// 64 is its business.
bool skip_unknown(Reader& r, std::uint32_t type) {
  if (type == wire::kVarint) {
    const char* start = r.p;
    std::uint64_t v = 0;
    return r.varint(v) && r.p - start < 10;
  }
  if (type == kLen) {
    std::string_view ignored;
    return len_field(r, ignored);
  }
  return r.skip(type);  // fixed32/fixed64; groups and invalid types decline
}

// google.protobuf.Any { string type_url = 1; bytes value = 2; }. A second occurrence of the
// field merges into the first (protobuf semantics), so fields only ever overwrite.
bool read_any(std::string_view bytes, ResourceView& out) {
  Reader r = reader_of(bytes);
  while (!r.done()) {
    std::uint32_t field = 0, type = 0;
    if (!next_tag(r, field, type)) return false;
    bool ok = field == 1 && type == kLen   ? ascii_field(r, out.payload_type)
              : field == 2 && type == kLen ? len_field(r, out.payload)
                                           : skip_unknown(r, type);
    if (!ok) return false;
  }
  return true;
}

// envoy.service.discovery.v3.Resource. aliases (4), ttl (6) and cache_control (7) are defined by
// our proto, so protobuf would validate them; apply() never reads them, and istiod does not send
// them for Address or Authorization: decline rather than validate.
bool read_resource(std::string_view bytes, ResourceView& out) {
  Reader r = reader_of(bytes);
  while (!r.done()) {
    std::uint32_t field = 0, type = 0;
    if (!next_tag(r, field, type)) return false;
    bool ok = false;
    if (type == kLen && (field == 4 || field == 6 || field == 7)) return false;
    if (field == 1 && type == kLen) {
      ok = ascii_field(r, out.version);
    } else if (field == 3 && type == kLen) {
      ok = ascii_field(r, out.name);
    } else if (field == 2 && type == kLen) {
      std::string_view any;
      out.has_payload = true;
      ok = len_field(r, any) && read_any(any, out);
    } else {
      ok = skip_unknown(r, type);
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace

namespace {

// A cursor over the top level of a message split into segments. Tags and lengths are read byte by
// byte where they straddle a boundary; a field's bytes are viewed in place when they lie in one
// segment and copied into `spill` otherwise.
class Chain {
 public:
  Chain(std::span<const std::string_view> segments, std::deque<std::string>& spill)
      : segments_(segments), spill_(spill) {
    for (std::string_view s : segments) remaining_ += s.size();
    settle();
  }

  [[nodiscard]] bool done() const { return at_ == segments_.size(); }

  // As short_varint(): at most 5 bytes, at most INT32_MAX.
  bool short_varint(std::uint64_t& out) {
    out = 0;
    for (int i = 0; i < 5 && !done(); ++i) {
      auto b = static_cast<std::uint8_t>(segments_[at_][offset_]);
      step(1);
      out |= static_cast<std::uint64_t>(b & 0x7f) << (7 * i);
      if ((b & 0x80) == 0) return out <= 0x7fffffffu;
    }
    return false;
  }

  bool tag(std::uint32_t& field, std::uint32_t& type) {
    std::uint64_t t = 0;
    if (!short_varint(t)) return false;
    field = static_cast<std::uint32_t>(t >> 3);
    type = static_cast<std::uint32_t>(t & 7);
    return field != 0;
  }

  // The next `n` bytes, in place when they lie in one segment.
  bool take(std::size_t n, std::string_view& out) {
    if (n > remaining_) return false;  // before reserving: the length comes from the peer
    if (n == 0) {
      out = {};
      return true;
    }
    std::string_view here = segments_[at_].substr(offset_);
    if (n <= here.size()) {
      out = here.substr(0, n);
      step(n);
      return true;
    }
    std::string& copy = spill_.emplace_back();
    copy.reserve(n);
    while (copy.size() < n && !done()) {
      std::string_view part = segments_[at_].substr(offset_, n - copy.size());
      copy.append(part);
      step(part.size());
    }
    out = copy;
    return copy.size() == n;
  }

  bool len_field(std::string_view& out) {
    std::uint64_t n = 0;
    return short_varint(n) && take(static_cast<std::size_t>(n), out);
  }

  // As skip_unknown(), for the top level.
  bool skip_unknown(std::uint32_t type) {
    std::string_view ignored;
    switch (type) {
      case wire::kVarint:
        for (int i = 0; i < 9 && !done(); ++i) {
          auto b = static_cast<std::uint8_t>(segments_[at_][offset_]);
          step(1);
          if ((b & 0x80) == 0) return true;
        }
        return false;  // 10 bytes or more: left to protobuf
      case wire::kFixed64:
        return skip_bytes(8);
      case kLen:
        return len_field(ignored);
      case wire::kFixed32:
        return skip_bytes(4);
      default:
        return false;
    }
  }

  bool skip_bytes(std::size_t n) {
    while (n > 0 && !done()) {
      std::size_t k = std::min(n, segments_[at_].size() - offset_);
      step(k);
      n -= k;
    }
    return n == 0;
  }

 private:
  void step(std::size_t n) {
    offset_ += n;
    remaining_ -= n;
    settle();
  }

  // Moves past exhausted (and empty) segments.
  void settle() {
    while (at_ < segments_.size() && offset_ == segments_[at_].size()) {
      ++at_;
      offset_ = 0;
    }
  }

  std::span<const std::string_view> segments_;
  std::deque<std::string>& spill_;
  std::size_t at_ = 0;
  std::size_t offset_ = 0;
  std::size_t remaining_ = 0;  // bytes not yet consumed, in all segments
};

// Resources in the response: sizes the view's vector once (a 100,000-resource push would otherwise
// regrow it, faulting in twice its final size). Only tags and lengths are read.
std::size_t count_resources(std::span<const std::string_view> segments) {
  std::deque<std::string> unused;
  Chain c(segments, unused);
  std::size_t n = 0;
  while (!c.done()) {
    std::uint32_t field = 0, type = 0;
    if (!c.tag(field, type)) break;
    if (type == kLen) {
      std::uint64_t len = 0;
      if (!c.short_varint(len)) break;
      n += field == 2 ? 1 : 0;
      if (!c.skip_bytes(static_cast<std::size_t>(len))) break;  // no copy, unlike take()
    } else if (!c.skip_unknown(type)) {
      break;
    }
  }
  return n;
}

}  // namespace

bool read_response_in_place(std::span<const std::string_view> segments, ResponseView& out,
                            std::deque<std::string>& spill) {
  out = ResponseView{};
  out.resources.reserve(count_resources(segments));
  Chain c(segments, spill);
  while (!c.done()) {
    std::uint32_t field = 0, type = 0;
    if (!c.tag(field, type)) return false;
    if (type != kLen) {
      if (!c.skip_unknown(type)) return false;
      continue;
    }
    std::string_view bytes;
    if (!c.len_field(bytes)) return false;
    bool ok = true;
    switch (field) {
      case 1:
        out.system_version_info = bytes;
        ok = wire::ascii(bytes);
        break;
      case 2:
        ok = read_resource(bytes, out.resources.emplace_back());
        break;
      case 4:
        out.type_url = bytes;
        ok = wire::ascii(bytes);
        break;
      case 5:
        out.nonce = bytes;
        ok = wire::ascii(bytes);
        break;
      case 6:
        out.removed_resources.push_back(bytes);
        ok = wire::ascii(bytes);
        break;
      default:
        break;  // unknown (protobuf keeps it aside)
    }
    if (!ok) return false;
  }
  return true;
}

ResponseView ResponseView::of(const envoy::service::discovery::v3::DeltaDiscoveryResponse& message) {
  ResponseView v;
  v.system_version_info = message.system_version_info();
  v.type_url = message.type_url();
  v.nonce = message.nonce();
  v.resources.reserve(static_cast<std::size_t>(message.resources_size()));
  for (const auto& r : message.resources()) {
    ResourceView& rv = v.resources.emplace_back();
    rv.name = r.name();
    rv.version = r.version();
    rv.has_payload = r.has_resource();
    rv.payload_type = r.resource().type_url();
    rv.payload = r.resource().value();
  }
  v.removed_resources.assign(message.removed_resources().begin(), message.removed_resources().end());
  return v;
}

DecodedResponse::DecodedResponse() = default;
DecodedResponse::DecodedResponse(DecodedResponse&&) noexcept = default;
DecodedResponse& DecodedResponse::operator=(DecodedResponse&&) noexcept = default;
DecodedResponse::~DecodedResponse() = default;

std::size_t DecodedResponse::copied_bytes() const noexcept {
  std::size_t n = 0;
  for (const auto& s : spill_) n += s.size();
  return n;
}

Result<DecodedResponse> DecodedResponse::decode(std::span<const std::string_view> segments) {
  DecodedResponse out;
  if (read_response_in_place(segments, out.view_, out.spill_)) return out;
  out.spill_.clear();
  std::string joined;
  for (std::string_view s : segments) joined.append(s);
  out.message_ = std::make_unique<envoy::service::discovery::v3::DeltaDiscoveryResponse>();
  if (!out.message_->ParseFromString(joined)) {
    return base::fail(base::Errc::kProtocol,
                      "DeltaDiscoveryResponse of " + std::to_string(joined.size()) + " bytes does not parse");
  }
  out.view_ = ResponseView::of(*out.message_);
  return out;
}

}  // namespace meshnode::xds
