// libFuzzer target for the local config (LOCAL_XDS_PATH, research §3.3; config/local_config): YAML
// → workloads, services, policies → StateSnapshot::build, as the proxy does at start and on reload.
// Malformed files must give an error, never a crash or an exception; what the parser accepts must
// keep its documented promises:
// - defaults applied: uid, serviceAccount, trustDomain, clusterId never empty;
// - service ports 1..65535, endpoint target ports 1..65535 (0 only in a service's own ports);
// - a workload's SPIFFE identity text parses back to the same trust domain, namespace and service
//   account (a '/' in a namespace would otherwise forge another identity);
// - a snapshot that builds indexes every workload by uid and by each (network, IP), every service
//   by key and VIP, every policy by key.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/spiffe.hpp"
#include "config/local_config.hpp"
#include "fuzz_check.hpp"
#include "state/snapshot.hpp"

namespace {

namespace state = meshnode::state;
using meshnode::base::SpiffeId;

void check_workload(const state::Workload& w) {
  FUZZ_CHECK(!w.uid.empty() && !w.service_account.empty() && !w.trust_domain.empty() && !w.cluster_id.empty(),
             "a default was not applied");
  for (const auto& [service, ports] : w.services) {
    for (const auto& p : ports) FUZZ_CHECK(p.service_port != 0 && p.target_port != 0, "endpoint port 0");
  }
  const SpiffeId id = w.identity();
  auto parsed = SpiffeId::parse(id.to_string());
  FUZZ_CHECK(parsed && *parsed == id, "the workload's identity text names another identity");
}

void check_snapshot(const state::StateSnapshot& s, const meshnode::config::LocalConfig& config) {
  for (const auto& w : config.workloads) {
    FUZZ_CHECK(s.workload_by_uid(w.uid) != nullptr, "workload not indexed by uid");
    for (const auto& ip : w.addresses) {
      auto owner = s.workload_by_address(w.network, ip);
      FUZZ_CHECK(owner && owner->uid == w.uid, "workload not indexed by address");
    }
  }
  for (const auto& svc : config.services) {
    const std::string key = svc.ns + "/" + svc.hostname;
    FUZZ_CHECK(s.service_by_key(key) != nullptr, "service not indexed by key");
    for (const auto& vip : svc.vips) FUZZ_CHECK(s.service_by_vip(vip.network, vip.address) != nullptr, "VIP");
  }
  for (const auto& p : config.policies) FUZZ_CHECK(s.policy_by_key(p.ns + "/" + p.name) != nullptr, "policy key");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = meshnode::config::parse_local_config(text, "fuzz.yaml");
  if (!config) {
    FUZZ_CHECK(config.error().context.starts_with("fuzz.yaml"), "error does not name the file");
    return 0;
  }
  for (const auto& w : config->workloads) check_workload(w);
  for (const auto& svc : config->services) {
    for (const auto& p : svc.ports) FUZZ_CHECK(p.service_port != 0, "service port 0");
  }
  auto snapshot = state::StateSnapshot::build(config->workloads, config->services, config->policies);
  if (snapshot) check_snapshot(**snapshot, *config);
  return 0;
}
