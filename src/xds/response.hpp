#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace envoy::service::discovery::v3 {
class DeltaDiscoveryResponse;
}  // namespace envoy::service::discovery::v3

namespace meshnode::xds {

using base::Result;

/// One envoy.service.discovery.v3.Resource of a response (proto/discovery.proto). Views into the
/// bytes or message it was read from.
struct ResourceView {
  std::string_view name;          ///< Resource.name (field 3)
  std::string_view version;       ///< Resource.version (field 1)
  bool has_payload = false;       ///< Resource.resource (field 2, google.protobuf.Any) is present
  std::string_view payload_type;  ///< Any.type_url
  std::string_view payload;       ///< Any.value: the resource message's wire bytes
};

/// A DeltaDiscoveryResponse (proto/discovery.proto) as views: what ResourceStore::apply() reads.
/// Building one copies no payload.
struct ResponseView {
  std::string_view system_version_info;
  std::string_view type_url;
  std::string_view nonce;
  std::vector<ResourceView> resources;              ///< in wire order
  std::vector<std::string_view> removed_resources;  ///< in wire order
  /// Views into `message`, which must outlive the view.
  [[nodiscard]] static ResponseView of(const envoy::service::discovery::v3::DeltaDiscoveryResponse& message);
};

/// A response decoded from its wire bytes, as the xDS client receives it from gRPC: a chain of
/// slices (about one per HTTP/2 DATA frame). The common shape (what istiod sends) is read in
/// place: the views point into the caller's segments, which must outlive this object, and only a
/// resource that straddles two segments is copied (into this object). Anything else — non-ASCII
/// strings (protobuf validates UTF-8), groups, fields our proto defines that apply() does not read
/// (aliases, ttl, cache_control), malformed bytes — is handed to the protobuf runtime, which then
/// gives the usual result; either way the view equals ResponseView::of() of the parsed message
/// (tests/unit/xds/response_test.cpp and the xds fuzz target compare both). Move-only.
class DecodedResponse {
 public:
  /// `segments`: the message's bytes in order (empty segments allowed).
  /// @returns Errc::kProtocol "DeltaDiscoveryResponse of N bytes does not parse" when the
  /// protobuf runtime refuses the bytes too.
  [[nodiscard]] static Result<DecodedResponse> decode(std::span<const std::string_view> segments);
  [[nodiscard]] static Result<DecodedResponse> decode(std::string_view wire) {
    return decode(std::span<const std::string_view>(&wire, 1));
  }
  /// Whether the bytes were read in place (no protobuf message built).
  [[nodiscard]] bool in_place() const noexcept { return message_ == nullptr; }
  /// Bytes of resources copied because they straddled two segments.
  [[nodiscard]] std::size_t copied_bytes() const noexcept;
  [[nodiscard]] const ResponseView& view() const noexcept { return view_; }

  DecodedResponse(DecodedResponse&&) noexcept;
  DecodedResponse& operator=(DecodedResponse&&) noexcept;
  ~DecodedResponse();

 private:
  DecodedResponse();
  ResponseView view_;
  std::deque<std::string> spill_;  // straddling fields (a deque: its strings never move)
  std::unique_ptr<envoy::service::discovery::v3::DeltaDiscoveryResponse> message_;  // the fallback
};

/// The in-place reader behind DecodedResponse::decode(): true and `out` filled when the bytes have
/// the common shape described there; false (and `out` unspecified) to leave them to the protobuf
/// runtime. Fields that straddle two segments are copied into `spill`. Exposed for tests.
[[nodiscard]] bool read_response_in_place(std::span<const std::string_view> segments, ResponseView& out,
                                          std::deque<std::string>& spill);

}  // namespace meshnode::xds
