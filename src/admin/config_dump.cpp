#include "admin/config_dump.hpp"

#include <nlohmann/json.hpp>

#include "state/rbac.hpp"

namespace meshnode::admin {
namespace {

using nlohmann::json;

json ports_json(const std::vector<state::PortMapping>& ports) {
  json out = json::object();
  for (const auto& p : ports) out[std::to_string(p.service_port)] = p.target_port;
  return out;
}

json workload_json(const state::Workload& w) {
  json ips = json::array();
  for (const auto& ip : w.addresses) ips.push_back(ip.to_string());
  json services = json::object();
  for (const auto& [key, ports] : w.services) services[key] = ports_json(ports);
  return json{{"uid", w.uid},
              {"name", w.name},
              {"namespace", w.ns},
              {"serviceAccount", w.service_account},
              {"trustDomain", w.trust_domain},
              {"identity", w.identity().to_string()},
              {"workloadIps", ips},
              {"protocol", w.protocol == state::TunnelProtocol::kHbone ? "HBONE" : "TCP"},
              {"node", w.node},
              {"network", w.network},
              {"status", w.healthy ? "Healthy" : "Unhealthy"},
              {"services", services},
              {"authorizationPolicies", w.authorization_policies}};
}

json service_json(const state::Service& s) {
  json vips = json::array();
  for (const auto& v : s.vips) vips.push_back(v.network + "/" + v.address.to_string());
  return json{{"name", s.name},         {"namespace", s.ns},
              {"hostname", s.hostname}, {"vips", vips},
              {"ports", ports_json(s.ports)}, {"subjectAltNames", s.subject_alt_names}};
}

json policy_json(const state::Authorization& p) {
  return json{{"name", p.name},
              {"namespace", p.ns},
              {"action", p.action == state::Authorization::Action::kAllow ? "Allow" : "Deny"},
              {"dryRun", p.dry_run},
              {"rules", p.rules.size()}};
}

json xds_json(const xds::XdsStatus& x) {
  json types = json::array();
  for (const auto& t : x.types) {
    types.push_back(json{{"typeUrl", t.type_url},
                         {"received", t.received},
                         {"resources", t.resources},
                         {"versionInfo", t.system_version_info},
                         {"lastNonce", t.last_nonce},
                         {"lastAckNonce", t.last_ack_nonce},
                         {"lastNackNonce", t.last_nack_nonce},
                         {"lastNackError", t.last_nack_error}});
  }
  return json{{"address", x.address}, {"connected", x.connected}, {"ready", x.ready},
              {"streams", x.streams}, {"lastError", x.last_error}, {"types", types}};
}

}  // namespace

std::string config_dump_json(const state::StateSnapshot& snapshot, const std::vector<EnrolledPod>& pods,
                             const std::vector<ca::CertificateStatus>& certificates, const xds::XdsStatus* xds) {
  json out;
  out["workloads"] = json::array();
  for (const auto& [uid, w] : snapshot.workloads()) out["workloads"].push_back(workload_json(*w));
  out["services"] = json::array();
  for (const auto& [key, s] : snapshot.services()) out["services"].push_back(service_json(s));
  out["policies"] = json::array();
  for (const auto& [key, p] : snapshot.policies()) out["policies"].push_back(policy_json(p));
  out["workloadState"] = json::object();
  for (const auto& pod : pods) {
    out["workloadState"][pod.uid] = json{
        {"state", pod.state},
        {"netns", pod.netns},
        {"info", {{"name", pod.name}, {"namespace", pod.ns}, {"serviceAccount", pod.service_account}}}};
  }
  out["certificates"] = json::array();
  for (const auto& c : certificates) {
    json chain = json::array();
    if (!c.serial_hex.empty()) {
      chain.push_back(json{{"serialNumber", c.serial_hex}, {"validFrom", c.not_before}, {"expirationTime", c.not_after}});
    }
    out["certificates"].push_back(json{{"identity", c.identity},
                                       {"state", c.state},
                                       {"certChain", chain},
                                       {"chainLength", c.chain_length},
                                       {"roots", c.roots},
                                       {"refreshAt", c.refresh_at},
                                       {"failures", c.failures},
                                       {"lastError", c.last_error}});
  }
  out["xds"] = xds == nullptr ? json(nullptr) : xds_json(*xds);
  return out.dump(2) + "\n";
}

}  // namespace meshnode::admin

namespace meshnode::admin {
namespace {

http::HttpResponse json_response(int status, const nlohmann::json& body) {
  http::HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = body.dump(2) + "\n";
  return r;
}

http::HttpResponse bad_request(const std::string& why) {
  return json_response(400, nlohmann::json{{"error", why},
                                           {"usage", "/debug/authz?src=<ip[:port]>&src_identity=<spiffe id>&dst=<ip:port>"}});
}

std::shared_ptr<const state::Workload> workload_with_ip(const state::StateSnapshot& snapshot, const base::IpAddr& ip) {
  for (const auto& [uid, w] : snapshot.workloads()) {
    for (const auto& a : w->addresses) {
      if (a == ip) return w;
    }
  }
  return nullptr;
}

}  // namespace

http::HttpResponse debug_authz(const state::StateSnapshot& snapshot, const std::map<std::string, std::string>& query) {
  auto get = [&](const char* key) -> std::string {
    auto it = query.find(key);
    return it == query.end() ? std::string() : it->second;
  };
  std::string src_text = get("src");
  auto src = base::SocketAddr::parse(src_text);
  if (!src) {
    auto ip = base::IpAddr::parse(src_text);
    if (!ip) return bad_request("src: '" + src_text + "' is not an IP or ip:port");
    src = base::SocketAddr{*ip, 0};
  }
  auto dst = base::SocketAddr::parse(get("dst"));
  if (!dst) return bad_request("dst: '" + get("dst") + "' is not ip:port");
  std::optional<base::SpiffeId> identity;
  if (!get("src_identity").empty()) {
    auto id = base::SpiffeId::parse(get("src_identity"));
    if (!id) return bad_request("src_identity: " + id.error().context);
    identity = *id;
  }
  auto workload = workload_with_ip(snapshot, dst->ip);
  if (!workload) return json_response(404, nlohmann::json{{"error", "no workload has IP " + dst->ip.to_string()}});
  state::AuthzRequest request{base::ClientAddr{*src}, identity, *dst, workload.get()};
  auto decision = state::authorize(snapshot, request);
  nlohmann::json policies = nlohmann::json::array();
  for (const auto& e : state::explain(snapshot, request)) {
    policies.push_back({{"policy", e.policy}, {"action", e.action}, {"dryRun", e.dry_run}, {"applies", e.applies},
                        {"matched", e.matched}, {"detail", e.detail}});
  }
  return json_response(200, nlohmann::json{{"decision", decision.allowed ? "allow" : "deny"},
                                           {"reason", decision.reason},
                                           {"decidingPolicy", decision.deciding_policy},
                                           {"dryRunDenies", decision.dry_run_denies},
                                           {"destinationWorkload", workload->uid},
                                           {"sourceIdentity", identity ? identity->to_string() : ""},
                                           {"policies", policies}});
}

}  // namespace meshnode::admin
