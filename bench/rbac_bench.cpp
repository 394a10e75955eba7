// One authorization decision against 10, 1,000 and 10,000 policies (issue 5).
//
// Shape of the policy set: 2 (N < 100) or 5 Global policies in istio-system, the rest
// Namespace-scope policies spread ~10 per namespace over many namespaces (half DENY on
// ports/source CIDRs, half ALLOW on principals/namespaces). The request goes to a workload in one
// namespace in the middle of the key order and is allowed by the last ALLOW of its namespace, so
// every in-scope policy is evaluated.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "state/rbac.hpp"

namespace meshnode::state {
namespace {

using Action = Authorization::Action;
using Scope = Authorization::Scope;

constexpr int kPerNamespace = 10;

StringMatch exact(std::string v) { return {StringMatch::Kind::kExact, std::move(v)}; }

Authorization make_policy(std::string ns, std::string name, Action action, Scope scope, Match m) {
  Authorization a;
  a.ns = std::move(ns);
  a.name = std::move(name);
  a.action = action;
  a.scope = scope;
  a.rules = {Rule{{Clause{{std::move(m)}}}}};
  return a;
}

std::vector<Authorization> make_policies(int count) {
  std::vector<Authorization> out;
  const int globals = count < 100 ? 2 : 5;
  for (int g = 0; g < globals; ++g) {
    Match m;
    if (g % 2 == 0) {
      m.not_principals = {{StringMatch::Kind::kPresence, ""}};  // "mTLS required"
    } else {
      m.destination_ports = {static_cast<std::uint16_t>(9000 + g)};
    }
    out.push_back(
        make_policy("istio-system", "global-" + std::to_string(g), Action::kDeny, Scope::kGlobal, m));
  }
  for (int i = 0; i < count - globals; ++i) {
    std::string ns = "ns-" + std::to_string(i / kPerNamespace);
    Match m;
    Action action = i % 2 == 0 ? Action::kDeny : Action::kAllow;
    if (action == Action::kDeny) {
      m.source_ips = {base::IpNet::parse("192.168.0.0/16").value()};
      m.destination_ports = {static_cast<std::uint16_t>(7000 + i % 100)};
    } else {
      m.principals = {exact("cluster.local/ns/client-" + std::to_string(i) + "/sa/client")};
      m.namespaces = {exact("client-" + std::to_string(i))};
    }
    out.push_back(make_policy(ns, "p-" + std::to_string(i), action, Scope::kNamespace, std::move(m)));
  }
  // The destination namespace's last ALLOW admits the benchmark's client.
  const std::string target_ns = "ns-" + std::to_string((count - globals) / kPerNamespace / 2);
  Match admit;
  admit.principals = {exact("cluster.local/ns/client/sa/client")};
  out.push_back(make_policy(target_ns, "zz-admit", Action::kAllow, Scope::kNamespace, std::move(admit)));
  return out;
}

void BM_Authorize(benchmark::State& state) {
  const int count = static_cast<int>(state.range(0));
  auto policies = make_policies(count);
  const std::string target_ns = policies.back().ns;
  Workload server;
  server.uid = "server";
  server.ns = target_ns;
  server.addresses = {base::IpAddr::parse("10.1.0.1").value()};
  auto snapshot = StateSnapshot::build({server}, {}, std::move(policies)).value();
  auto destination = snapshot->workload_by_uid("server");

  AuthzRequest request;
  request.source = base::ClientAddr{base::SocketAddr::parse("10.0.0.1:40000").value()};
  request.source_identity = base::SpiffeId::parse("spiffe://cluster.local/ns/client/sa/client").value();
  request.destination = base::SocketAddr::parse("10.1.0.1:8080").value();
  request.destination_workload = destination.get();

  if (!authorize(*snapshot, request).allowed) {
    state.SkipWithError("benchmark request is not allowed");
    return;
  }
  for (auto _ : state) {
    AuthzDecision d = authorize(*snapshot, request);
    benchmark::DoNotOptimize(d);
  }
  state.counters["policies"] = static_cast<double>(snapshot->policies().size());
}
BENCHMARK(BM_Authorize)->Arg(10)->Arg(1000)->Arg(10000);

}  // namespace
}  // namespace meshnode::state
