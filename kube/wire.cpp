#include "kube/wire.hpp"

#include <cstring>
#include <string>

namespace meshnode::kube::wire {

bool Reader::read_varint(std::uint64_t& out) {
  out = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) return false;
    const auto byte = static_cast<std::uint8_t>(data_[pos_++]);
    out |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;  // more than 10 bytes: not a varint
}

base::Result<std::optional<Field>> Reader::next() {
  if (pos_ >= data_.size()) return std::optional<Field>{};
  const std::size_t at = pos_;
  std::uint64_t tag = 0;
  if (!read_varint(tag)) return base::fail(base::Errc::kProtocol, "protobuf: truncated tag at byte " + std::to_string(at));
  Field field;
  field.number = static_cast<std::uint32_t>(tag >> 3);
  field.wire_type = static_cast<std::uint8_t>(tag & 7);
  if (field.number == 0 || (tag >> 3) > 0x1fffffff) {
    return base::fail(base::Errc::kProtocol, "protobuf: invalid field number at byte " + std::to_string(at));
  }
  auto need = [&](std::size_t n) -> bool { return data_.size() - pos_ >= n; };
  switch (field.wire_type) {
    case 0:
      if (!read_varint(field.value)) {
        return base::fail(base::Errc::kProtocol, "protobuf: truncated varint of field " + std::to_string(field.number));
      }
      break;
    case 1:
    case 5: {
      const std::size_t n = field.wire_type == 1 ? 8 : 4;
      if (!need(n)) {
        return base::fail(base::Errc::kProtocol, "protobuf: truncated fixed field " + std::to_string(field.number));
      }
      std::uint64_t v = 0;
      std::memcpy(&v, data_.data() + pos_, n);  // little-endian on the wire and on x86/arm64
      field.value = v;
      pos_ += n;
      break;
    }
    case 2: {
      std::uint64_t len = 0;
      if (!read_varint(len) || len > data_.size() - pos_) {
        return base::fail(base::Errc::kProtocol,
                          "protobuf: field " + std::to_string(field.number) + " length runs past the end of the message");
      }
      field.bytes = data_.substr(pos_, static_cast<std::size_t>(len));
      pos_ += static_cast<std::size_t>(len);
      break;
    }
    default:
      return base::fail(base::Errc::kProtocol, "protobuf: unsupported wire type " + std::to_string(field.wire_type) +
                                                   " of field " + std::to_string(field.number));
  }
  return std::optional<Field>{field};
}

}  // namespace meshnode::kube::wire
