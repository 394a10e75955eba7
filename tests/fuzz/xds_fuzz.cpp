// libFuzzer target for xDS → state (STYLE tests/fuzz): a DeltaDiscoveryResponse from the control
// plane, applied to the resource store and built into a snapshot. No byte sequence may crash the
// decode, and whatever the store accepts must build (bad resources are rejected by name instead of
// corrupting the snapshot). Byte 0 picks the type URL; the rest is the response on the wire.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>

#include "discovery.pb.h"
#include "xds/convert.hpp"
#include "xds/store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  google::protobuf::LogSilencer silence;
  if (size == 0) return 0;
  envoy::service::discovery::v3::DeltaDiscoveryResponse response;
  if (!response.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  response.set_type_url(
      std::string(data[0] % 2 == 0 ? meshnode::xds::kAddressType : meshnode::xds::kAuthorizationType));
  auto store = meshnode::xds::ResourceStore::create({});
  if (!store) __builtin_trap();
  auto outcome = store->apply(response);
  (void)outcome.error_message();
  // Apply twice: replacement and conflicts with what is already held.
  (void)store->apply(response);
  if (!store->build()) __builtin_trap();
  return 0;
}
