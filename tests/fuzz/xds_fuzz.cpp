// libFuzzer target for xDS → state (STYLE tests/fuzz): a DeltaDiscoveryResponse from the control
// plane, decoded as the xDS client does (DecodedResponse, read in place across gRPC's slices),
// applied to the resource store and built into a snapshot. No byte sequence may crash the decode;
// the in-place reader must agree with protobuf on every input (same accept/refuse, same fields);
// and whatever the store accepts must build (bad resources are rejected by name instead of
// corrupting the snapshot). Byte 0 picks the type URL (bit 0) and the slice size (the rest); the
// rest is the response on the wire.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "discovery.pb.h"
#include "xds/convert.hpp"
#include "xds/response.hpp"
#include "xds/store.hpp"

namespace {

bool same(const meshnode::xds::ResponseView& a, const meshnode::xds::ResponseView& b) {
  if (a.system_version_info != b.system_version_info || a.type_url != b.type_url || a.nonce != b.nonce ||
      a.removed_resources != b.removed_resources || a.resources.size() != b.resources.size())
    return false;
  for (std::size_t i = 0; i < a.resources.size(); ++i) {
    const auto& x = a.resources[i];
    const auto& y = b.resources[i];
    if (x.name != y.name || x.version != y.version || x.has_payload != y.has_payload ||
        x.payload_type != y.payload_type || x.payload != y.payload)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  google::protobuf::LogSilencer silence;
  if (size == 0) return 0;
  std::string_view wire(reinterpret_cast<const char*>(data + 1), size - 1);
  std::size_t slice = 1 + (data[0] >> 1);  // 1..128 bytes
  std::vector<std::string_view> segments;
  for (std::size_t at = 0; at < wire.size(); at += slice) segments.push_back(wire.substr(at, slice));

  envoy::service::discovery::v3::DeltaDiscoveryResponse message;
  bool parses = message.ParseFromArray(wire.data(), static_cast<int>(wire.size()));
  auto decoded = meshnode::xds::DecodedResponse::decode(segments);
  if (decoded.has_value() != parses) __builtin_trap();
  if (!parses) return 0;
  if (!same(decoded->view(), meshnode::xds::ResponseView::of(message))) __builtin_trap();

  meshnode::xds::ResponseView view = decoded->view();
  view.type_url = data[0] % 2 == 0 ? meshnode::xds::kAddressType : meshnode::xds::kAuthorizationType;
  auto store = meshnode::xds::ResourceStore::create({});
  if (!store) __builtin_trap();
  auto outcome = store->apply(view);
  (void)outcome.error_message();
  // Apply twice: replacement and conflicts with what is already held.
  (void)store->apply(view);
  if (!store->build()) __builtin_trap();
  return 0;
}
