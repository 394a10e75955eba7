#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "base/address_roles.hpp"
#include "base/ip.hpp"
#include "h2/header.hpp"

namespace meshnode::hbone {

/// What an HBONE client puts on a CONNECT request besides :method/:authority.
/// Source: Istio HBONE (research §2.1).
struct ConnectInfo {
  base::HboneTarget authority;    ///< :authority, the target podIP:targetPort
  base::ClientAddr client;        ///< the original client, sent as forwarded: for="ip:port"
  std::string service_host;       ///< destination service hostname (adds ;host=...), may be empty
  std::string baggage;            ///< comma-joined k=v of the source workload, may be empty
  std::string traceparent;        ///< "00-<32 hex>-<16 hex>-00"
};

/// Request headers of an HBONE CONNECT: `:method CONNECT`, `:authority`, `forwarded`, and
/// `baggage` / `traceparent` when non-empty. No :scheme or :path (RFC 9113 §8.5).
[[nodiscard]] h2::Headers connect_headers(const ConnectInfo& info);

/// A fresh W3C traceparent from two random 64-bit words for the trace id and one for the parent:
/// "00-<32 hex>-<16 hex>-00".
[[nodiscard]] std::string make_traceparent(std::uint64_t trace_hi, std::uint64_t trace_lo, std::uint64_t parent);

/// The trace id of a peer's W3C traceparent (Trace Context §3.2), validated because it goes into
/// every log line of the connection: "<version>-<trace id>-<parent id>-<flags>", all lowercase
/// hex, version 2 digits and not "ff", trace id 32 digits and parent id 16, neither all zeros,
/// flags 2; version "00" has nothing after the flags, a later version only "-..." (§3.2.4).
/// @returns the 32-digit trace id (a view into `traceparent`); nullopt when anything is off
///          (spaces, tabs, upper case, wrong lengths), so the caller drops it.
[[nodiscard]] std::optional<std::string_view> traceparent_trace_id(std::string_view traceparent);

/// Parses a CONNECT :authority of the form a.b.c.d:port or [v6]:port. Hostname authorities
/// (double HBONE) are not supported yet: Errc::kInvalidArgument naming the text.
[[nodiscard]] base::Result<base::HboneTarget> parse_authority(std::string_view authority);

}  // namespace meshnode::hbone
