#pragma once

// A reader of protobuf wire bytes for the xDS fast paths (wire_workload.cpp, response.cpp): the
// encoding of https://protobuf.dev/programming-guides/encoding/ — varints, tags, length-delimited
// fields. Internal to src/xds. Each fast path accepts only what it can decode exactly as the
// protobuf runtime would and otherwise declines, so the reader only needs to be strict.

#include <cstdint>
#include <cstring>
#include <string_view>

namespace meshnode::xds::wire {

inline constexpr std::uint32_t kVarint = 0;
inline constexpr std::uint32_t kFixed64 = 1;
inline constexpr std::uint32_t kLen = 2;
inline constexpr std::uint32_t kFixed32 = 5;

/// A cursor over one message's bytes. Every read returns false on truncated or malformed input
/// and may then have advanced the cursor.
struct Reader {
  const char* p;
  const char* end;

  [[nodiscard]] bool done() const { return p == end; }

  bool varint(std::uint64_t& out) {
    out = 0;
    for (int shift = 0; shift < 64 && p != end; shift += 7) {
      auto b = static_cast<std::uint8_t>(*p++);
      out |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // truncated or longer than 10 bytes
  }

  /// A length-delimited field's bytes.
  bool bytes(std::string_view& out) {
    std::uint64_t n = 0;
    if (!varint(n) || n > static_cast<std::uint64_t>(end - p)) return false;
    out = std::string_view(p, static_cast<std::size_t>(n));
    p += n;
    return true;
  }

  /// Field number and wire type of the next field; false for field number 0.
  bool tag(std::uint32_t& field, std::uint32_t& type) {
    std::uint64_t t = 0;
    if (!varint(t) || t > 0xffffffffu) return false;
    field = static_cast<std::uint32_t>(t >> 3);
    type = static_cast<std::uint32_t>(t & 7);
    return field != 0;
  }

  /// Skips the value of a field of wire type `type` that the caller does not use. Groups (wire
  /// types 3 and 4, deprecated) and the invalid types 6 and 7 are refused.
  bool skip(std::uint32_t type) {
    std::uint64_t v = 0;
    std::string_view b;
    switch (type) {
      case kVarint:
        return varint(v);
      case kFixed64:
        return advance(8);
      case kLen:
        return bytes(b);
      case kFixed32:
        return advance(4);
      default:
        return false;
    }
  }

 private:
  bool advance(std::size_t n) {
    if (static_cast<std::size_t>(end - p) < n) return false;
    p += n;
    return true;
  }
};

inline Reader reader_of(std::string_view bytes) { return Reader{bytes.data(), bytes.data() + bytes.size()}; }

/// Protobuf rejects a proto3 string that is not UTF-8; ASCII is always fine, so the fast paths
/// accept ASCII and leave anything else to the protobuf runtime rather than re-implementing its
/// validator.
inline bool ascii(std::string_view s) {
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t chunk = 0;
    std::memcpy(&chunk, s.data() + i, 8);
    if ((chunk & 0x8080808080808080ULL) != 0) return false;
  }
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0x80) != 0) return false;
  }
  return true;
}

/// A proto3 string field: length-delimited and ASCII (see ascii()).
inline bool string_field(Reader& r, std::uint32_t type, std::string_view& out) {
  return type == kLen && r.bytes(out) && ascii(out);
}

}  // namespace meshnode::xds::wire
