#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "base/error.hpp"

namespace meshnode::kube::wire {

/// One field of a protobuf message as it stands on the wire (protobuf encoding spec: tag =
/// field_number << 3 | wire_type). `value` holds varints and fixed 32/64-bit values; `bytes`
/// views length-delimited payloads inside the reader's buffer (no copy).
struct Field {
  std::uint32_t number = 0;
  std::uint8_t wire_type = 0;  ///< 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  std::uint64_t value = 0;
  std::string_view bytes;
};

/// A forward-only reader of protobuf fields over a byte view, used for the small envelopes
/// (runtime.Unknown, WatchEvent, lists) so that embedded objects are viewed, not copied, and one
/// bad list item does not take the whole page down. The objects themselves are parsed by the
/// generated code. Pure; the viewed buffer must outlive the reader and its fields.
class Reader {
 public:
  explicit Reader(std::string_view data) noexcept : data_(data) {}

  /// The next field, or nullopt at the end of the buffer.
  /// @returns Errc::kProtocol for a truncated varint or payload, a length past the end, field
  ///          number 0, or the deprecated group wire types 3/4 (Kubernetes never sends them).
  [[nodiscard]] base::Result<std::optional<Field>> next();

 private:
  [[nodiscard]] bool read_varint(std::uint64_t& out);
  std::string_view data_;
  std::size_t pos_ = 0;
};

/// Calls `fn(const Field&)` for every field of `data` in order.
/// @returns the Reader's Errc::kProtocol for a malformed message (fields before it were visited).
template <class Fn>
[[nodiscard]] base::Result<void> visit(std::string_view data, Fn&& fn) {
  Reader reader(data);
  while (true) {
    auto field = reader.next();
    if (!field) return std::unexpected(field.error());
    if (!*field) return {};
    fn(**field);
  }
}

}  // namespace meshnode::kube::wire
