#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "discovery.pb.h"

namespace meshnode::fakes {

/// The xDS resources of a fake control plane, by type.
struct ResourceSet {
  std::vector<envoy::service::discovery::v3::Resource> addresses;       ///< istio.workload.Address
  std::vector<envoy::service::discovery::v3::Resource> authorizations;  ///< istio.security.Authorization
};

/// Parses a resource file (YAML, hence also JSON) for meshnode-fake-istiod and the tests:
///
///   resources:
///   - workload: {uid: ..., name: ..., namespace: ..., addresses: ["198.19.1.10"], tunnelProtocol: HBONE}
///   - service: {name: ..., namespace: ..., hostname: ..., addresses: [{network: "", address: "10.0.0.1"}]}
///   - authorization: {name: ..., namespace: ..., scope: WORKLOAD_SELECTOR, action: DENY, rules: [...]}
///     name: ...            # optional: resource name (default: uid / "<ns>/<hostname>" / "<ns>/<name>")
///     version: ...         # optional: default = a hash of the payload (unchanged resources keep it)
///     unknownFields: {"99": "text"}  # optional: extra length-delimited fields in the message (tests)
///
/// `workload`, `service` and `authorization` are the messages in the protobuf JSON mapping
/// (camelCase or proto field names; enums by name or number, so unknown values can be sent); as a
/// convenience, an "address" string or an "addresses" list item that is an IP is written as text
/// and encoded to its bytes here. Workloads get the aliases istiod gives them ("<network>/<ip>").
/// Errc::kConfig naming the entry that is wrong.
[[nodiscard]] base::Result<ResourceSet> parse_resources(std::string_view text);
[[nodiscard]] base::Result<ResourceSet> load_resources(const std::filesystem::path& file);

}  // namespace meshnode::fakes
