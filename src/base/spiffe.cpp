#include "base/spiffe.hpp"

#include <vector>

namespace meshnode::base {

Result<SpiffeId> SpiffeId::parse(std::string_view uri) {
  constexpr std::string_view kScheme = "spiffe://";
  auto bad = [&](std::string_view why) {
    return fail(Errc::kInvalidArgument, "invalid SPIFFE identity '" + std::string(uri) + "': " + std::string(why));
  };
  if (!uri.starts_with(kScheme)) return bad("scheme is not spiffe://");
  // SPIFFE ID spec §2: a SPIFFE ID has no query and no fragment. Without this check
  // ".../sa/zcli#frag" would become the service account "zcli#frag".
  if (uri.find_first_of("?#") != std::string_view::npos) return bad("a SPIFFE ID has no query or fragment");
  std::vector<std::string_view> parts;
  std::string_view rest = uri.substr(kScheme.size());
  while (true) {
    auto slash = rest.find('/');
    parts.push_back(rest.substr(0, slash));
    if (slash == std::string_view::npos) break;
    rest = rest.substr(slash + 1);
  }
  if (parts.size() != 5) return bad("expected <trust domain>/ns/<namespace>/sa/<service account>");
  if (parts[1] != "ns" || parts[3] != "sa") return bad("expected the literals 'ns' and 'sa'");
  for (auto p : parts) {
    if (p.empty()) return bad("empty path segment");
  }
  return SpiffeId{std::string(parts[0]), std::string(parts[2]), std::string(parts[4])};
}

std::string SpiffeId::to_string() const {
  return "spiffe://" + trust_domain + "/ns/" + ns + "/sa/" + service_account;
}

}  // namespace meshnode::base
