#pragma once

#include <compare>
#include <string>
#include <string_view>

#include "base/error.hpp"

namespace meshnode::base {

/// A SPIFFE identity of an Istio workload: spiffe://<trust domain>/ns/<namespace>/sa/<service account>.
/// Source: Istio identity format (exactly 5 path segments with the literals `ns` and `sa`).
struct SpiffeId {
  std::string trust_domain;
  std::string ns;
  std::string service_account;

  /// Parses the URI form. Errc::kInvalidArgument naming the text when the scheme, segment count,
  /// literals or an empty component are wrong, or when it has a query or fragment (`?`, `#`:
  /// SPIFFE ID spec §2 forbids both).
  [[nodiscard]] static Result<SpiffeId> parse(std::string_view uri);
  /// "spiffe://td/ns/ns/sa/sa".
  [[nodiscard]] std::string to_string() const;

  friend auto operator<=>(const SpiffeId&, const SpiffeId&) = default;
  friend bool operator==(const SpiffeId&, const SpiffeId&) = default;
};

}  // namespace meshnode::base
