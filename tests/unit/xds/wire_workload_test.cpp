// fast_workload_from_address() must give exactly what protobuf parse + to_workload() give, or
// decline. Compared on generated workloads (every field the conversion reads, edge values, values
// to_workload() rejects, non-ASCII strings, unsupported fields) and on byte-level mutations of
// them (truncation, flipped bytes, duplicated fields).

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "unit/xds/resources.hpp"
#include "workload.pb.h"
#include "xds/convert.hpp"

namespace meshnode::xds {
namespace {

namespace pw = istio::workload;

struct Checked {
  int fast = 0;      // accepted by the fast path (and equal to the protobuf path)
  int declined = 0;  // left to the protobuf path
};

// The property, for one payload.
void check(const std::string& bytes, Checked& counts, const std::string& what) {
  state::InternedStringBatch strings;
  state::Workload fast;
  bool took = fast_workload_from_address(bytes, strings, fast);
  if (!took) {
    ++counts.declined;
    return;
  }
  ++counts.fast;
  pw::Address message;
  ASSERT_TRUE(message.ParseFromString(bytes)) << what << ": the fast path took bytes protobuf rejects";
  ASSERT_TRUE(message.has_workload()) << what;
  auto slow = to_workload(message.workload());
  ASSERT_TRUE(slow) << what << ": the fast path took what to_workload rejects: " << slow.error().message();
  EXPECT_EQ(fast, *slow) << what;
}

std::string pick(std::mt19937& rng, const std::vector<std::string>& from) { return from[rng() % from.size()]; }

pw::Workload generated(std::mt19937& rng) {
  const std::vector<std::string> names = {"", "a", "web-1", "cluster.local", "default", "ns/x", "Kubernetes",
                                          "node-7", "v1"};
  const std::vector<std::string> raw_ips = {std::string("\x0a\x00\x00\x01", 4), std::string("\x0a\x00\x00\x02", 4),
                                            std::string(16, '\x20'), std::string(3, '\x01'), ""};
  const std::vector<std::string> keys = {"ns/svc.example", "ns/other", "/bad", "bad/", "noslash", "ns/caf\xc3\xa9"};
  auto chance = [&](int in) { return rng() % static_cast<unsigned>(in) == 0; };
  pw::Workload w;
  w.set_uid(chance(8) ? "" : "Kubernetes//Pod/ns/" + pick(rng, names) + std::to_string(rng() % 100));
  w.set_name(pick(rng, names));
  w.set_namespace_(pick(rng, names));
  w.set_network(chance(3) ? pick(rng, names) : "");
  w.set_trust_domain(chance(2) ? pick(rng, names) : "");
  w.set_service_account(chance(2) ? pick(rng, names) : "");
  w.set_cluster_id(chance(2) ? pick(rng, names) : "");
  w.set_node(pick(rng, names));
  w.set_hostname(chance(4) ? pick(rng, names) : "");
  w.set_canonical_name(pick(rng, names));
  w.set_canonical_revision(pick(rng, names));
  w.set_workload_name(chance(2) ? w.canonical_name() : pick(rng, names));
  w.set_workload_type(static_cast<pw::WorkloadType>(rng() % 6));
  w.set_tunnel_protocol(static_cast<pw::TunnelProtocol>(chance(4) ? rng() % 4 : 1));
  w.set_status(static_cast<pw::WorkloadStatus>(rng() % 3));
  w.set_network_mode(static_cast<pw::NetworkMode>(chance(5) ? rng() % 3 : 0));
  w.set_native_tunnel(chance(3));
  for (int i = static_cast<int>(rng() % 6); i > 0; --i) w.add_addresses(chance(6) ? pick(rng, raw_ips) : raw_ips[i % 3]);
  for (int i = static_cast<int>(rng() % 4); i > 0; --i) {
    auto& list = (*w.mutable_services())[chance(3) ? pick(rng, keys) : "ns/svc-" + std::to_string(i)];
    for (int p = static_cast<int>(rng() % 3); p > 0; --p) {
      auto* port = list.add_ports();
      port->set_service_port(chance(6) ? static_cast<std::uint32_t>(rng() % 3) * 65535 : 80 + p);
      port->set_target_port(chance(6) ? 70000 : static_cast<std::uint32_t>(rng() % 2) * 8080);
      if (chance(3)) port->set_app_protocol(static_cast<pw::AppProtocol>(rng() % 3));
    }
  }
  for (int i = static_cast<int>(rng() % 3); i > 0; --i) w.add_authorization_policies(pick(rng, names));
  if (chance(2)) {
    w.mutable_locality()->set_region(pick(rng, names));
    w.mutable_locality()->set_zone(pick(rng, names));
    if (chance(2)) w.mutable_locality()->set_subzone(pick(rng, names));
  }
  if (chance(2)) w.mutable_capacity()->set_value(static_cast<std::uint32_t>(rng() % 4));
  if (chance(10)) {  // a valid non-ASCII string somewhere (protobuf accepts it; the fast path declines)
    const std::string cafe = "caf\xc3\xa9";
    switch (rng() % 4) {
      case 0: w.set_node(cafe); break;
      case 1: w.mutable_locality()->set_zone(cafe); break;
      case 2: w.add_authorization_policies(cafe); break;
      default: w.set_name(cafe); break;
    }
  }
  if (chance(12)) w.mutable_waypoint();
  if (chance(12)) w.mutable_application_tunnel()->set_protocol(static_cast<pw::ApplicationTunnel::Protocol>(rng() % 2));
  if (chance(12)) w.add_extensions()->set_name("x");
  return w;
}

TEST(FastWorkload, EqualsTheProtobufPathOnGeneratedWorkloads) {
  std::mt19937 rng(7);
  Checked counts;
  for (int i = 0; i < 20000; ++i) {
    pw::Address a;
    *a.mutable_workload() = generated(rng);
    check(a.SerializeAsString(), counts, "workload " + std::to_string(i));
    if (HasFatalFailure()) return;
  }
  // Not vacuous: a good share is taken by the fast path, and the rest was declined.
  std::printf("generated: %d fast, %d declined\n", counts.fast, counts.declined);
  EXPECT_GT(counts.fast, 1500);
  EXPECT_GT(counts.declined, 1500);
}

TEST(FastWorkload, EqualsTheProtobufPathOnMutatedBytes) {
  std::mt19937 rng(11);
  Checked counts;
  for (int i = 0; i < 20000; ++i) {
    pw::Address a;
    *a.mutable_workload() = generated(rng);
    std::string bytes = a.SerializeAsString();
    const auto kind = rng() % 4;
    switch (kind) {
      case 0:  // truncated
      case 1:  // a few bytes changed
        test::damage(bytes, rng, kind == 0);
        break;
      case 2: {  // the workload twice (protobuf merges the two), or a workload then a service
        pw::Address more;
        if (rng() % 2 == 0) {
          *more.mutable_workload() = generated(rng);
        } else {
          more.mutable_service()->set_name("s");
        }
        bytes += more.SerializeAsString();
        break;
      }
      default: {  // a field of the workload repeated at its end (last one wins or merges)
        pw::Workload extra;
        switch (rng() % 5) {
          case 0: extra.set_uid("Kubernetes//Pod/ns/again"); break;
          case 1: extra.mutable_locality()->set_zone("z2"); break;
          case 2: (*extra.mutable_services())["ns/svc-1"].add_ports()->set_service_port(99); break;
          case 3: extra.mutable_capacity()->set_value(9); break;
          default: extra.set_tunnel_protocol(pw::NONE); break;
        }
        pw::Address outer;
        *outer.mutable_workload() = extra;
        std::string tail = extra.SerializeAsString();
        // Re-frame: the original workload body + the extra fields inside one field-1 message.
        pw::Address original;
        if (!original.ParseFromString(bytes)) break;
        std::string body = original.workload().SerializeAsString() + tail;
        pw::Address framed;
        bytes.clear();
        bytes.push_back('\x0a');
        std::size_t n = body.size();
        do {
          bytes.push_back(static_cast<char>((n & 0x7f) | (n > 0x7f ? 0x80 : 0)));
          n >>= 7;
        } while (n != 0);
        bytes += body;
        break;
      }
    }
    check(bytes, counts, "mutation " + std::to_string(i));
    if (HasFatalFailure()) return;
  }
  std::printf("mutated: %d fast, %d declined\n", counts.fast, counts.declined);
  EXPECT_GT(counts.fast, 500);
  EXPECT_GT(counts.declined, 5000);
}

TEST(FastWorkload, TakesTheBenchmarkShapeAndDeclinesServices) {
  auto w = test::pod("default", "web-1", "10.0.0.1");
  auto& ports = (*w.mutable_services())["default/web.default.svc.cluster.local"];
  ports.add_ports()->set_service_port(80);
  w.mutable_locality()->set_region("r1");
  pw::Address a;
  *a.mutable_workload() = w;
  Checked counts;
  check(a.SerializeAsString(), counts, "pod");
  EXPECT_EQ(counts.fast, 1);
  pw::Address s;
  *s.mutable_service() = test::service("default", "web", "10.96.0.1");
  state::InternedStringBatch strings;
  state::Workload out;
  EXPECT_FALSE(fast_workload_from_address(s.SerializeAsString(), strings, out));
}

// A sidecar that serves HBONE itself (istiod sets native_tunnel): no early data goes to its Envoy
// (state::Route::early_data), so both paths must carry the field, not only agree on it.
TEST(FastWorkload, CarriesNativeTunnel) {
  auto w = test::pod("default", "sidecar-1", "10.0.0.9");
  w.set_native_tunnel(true);
  pw::Address a;
  *a.mutable_workload() = w;
  state::InternedStringBatch strings;
  state::Workload fast;
  ASSERT_TRUE(fast_workload_from_address(a.SerializeAsString(), strings, fast));
  EXPECT_TRUE(fast.native_tunnel);
  auto slow = to_workload(w);
  ASSERT_TRUE(slow) << slow.error().message();
  EXPECT_TRUE(slow->native_tunnel);
}

}  // namespace
}  // namespace meshnode::xds
