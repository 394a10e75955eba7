// xDS apply benchmark (issue #12): one Delta xDS response carrying N workloads and M services,
// decoded from its wire bytes, converted and published as one StateSnapshot — the work the xDS
// client does per response, minus the network. Prints apply time and retained state memory per
// workload (RSS growth after the response and its decode buffers are gone, divided by N), then
// the steady state: the median wall and CPU time of 21 one-pod deltas (a new pod, an updated pod,
// a removed pod, in turn), each applied and published as its own snapshot.
// Targets: <= 0.35 s per 100,000 workloads, <= 1 KB per workload, deltas proportional to their size.
//
// Usage: xds_apply_bench [--repeat N] [workloads services]...  (default: 10000 1000 100000 10000)
// --repeat N: the initial apply runs N times (a fresh store each time); repeat_median_cpu_s_per_100k
// is the median over them (later runs reuse memory the first one faulted in, so they are cheaper);
// every other figure is the first run's. Also for profiling: the apply then dominates the samples.

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "discovery.pb.h"
#include "workload.pb.h"
#include "base/memory.hpp"
#include "xds/convert.hpp"
#include "xds/response.hpp"
#include "xds/store.hpp"

namespace {

using namespace meshnode;
namespace discovery = envoy::service::discovery::v3;

// CPU time of the process (all threads: big responses are decoded on helper threads): the figure
// that does not depend on what else the machine runs.
double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Minor page faults of the process so far (first touches of fresh memory, all threads).
long minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

long rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

std::string ip_bytes(std::uint32_t v) {
  std::string b(4, '\0');
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (24 - 8 * i)) & 0xff);
  return b;
}

// A realistic pod: istiod fills these fields for every Kubernetes pod in ambient mode.
istio::workload::Address workload(int i, int services) {
  istio::workload::Address a;
  auto* w = a.mutable_workload();
  std::string ns = "ns-" + std::to_string(i % 100);
  std::string name = "deploy-" + std::to_string(i / 10) + "-7f9c8d6b5-" + std::to_string(10000 + i);
  w->set_uid("Kubernetes//Pod/" + ns + "/" + name);
  w->set_name(name);
  w->set_namespace_(ns);
  w->add_addresses(ip_bytes(0x0a000000u + static_cast<std::uint32_t>(i)));
  w->set_tunnel_protocol(istio::workload::HBONE);
  w->set_trust_domain("cluster.local");
  w->set_service_account("sa-" + std::to_string(i / 10));
  w->set_node("node-" + std::to_string(i % 500));
  w->set_canonical_name("deploy-" + std::to_string(i / 10));
  w->set_canonical_revision("v1");
  w->set_workload_name("deploy-" + std::to_string(i / 10));
  w->set_cluster_id("Kubernetes");
  auto& ports =
      (*w->mutable_services())[ns + "/svc-" + std::to_string(i % services) + "." + ns + ".svc.cluster.local"];
  auto* p = ports.add_ports();
  p->set_service_port(80);
  p->set_target_port(8080);
  w->mutable_locality()->set_region("region-1");
  w->mutable_locality()->set_zone("zone-" + std::to_string(i % 3));
  return a;
}

istio::workload::Address service(int i) {
  istio::workload::Address a;
  auto* s = a.mutable_service();
  std::string ns = "ns-" + std::to_string(i % 100);
  s->set_name("svc-" + std::to_string(i));
  s->set_namespace_(ns);
  s->set_hostname("svc-" + std::to_string(i) + "." + ns + ".svc.cluster.local");
  auto* vip = s->add_addresses();
  vip->set_address(ip_bytes(0x0a600000u + static_cast<std::uint32_t>(i)));
  auto* p = s->add_ports();
  p->set_service_port(80);
  p->set_target_port(8080);
  return a;
}

std::string make_response(int workloads, int services) {
  discovery::DeltaDiscoveryResponse resp;
  resp.set_type_url(std::string(xds::kAddressType));
  resp.set_nonce("bench");
  for (int i = 0; i < services; ++i) {
    auto* r = resp.add_resources();
    auto a = service(i);
    r->set_name(a.service().namespace_() + "/" + a.service().hostname());
    r->set_version("1");
    r->mutable_resource()->PackFrom(a);
  }
  for (int i = 0; i < workloads; ++i) {
    auto* r = resp.add_resources();
    auto a = workload(i, services);
    r->set_name(a.workload().uid());
    r->set_version("1");
    r->mutable_resource()->PackFrom(a);
  }
  return resp.SerializeAsString();
}

struct Applied {
  std::unique_ptr<xds::ResourceStore> store;
  std::shared_ptr<const state::StateSnapshot> snapshot;
  double cpu_s = 0, wall_s = 0, decode_ms = 0, convert_ms = 0, snapshot_ms = 0;
  // The same phases in process CPU time (milliseconds): comparable under a loaded machine.
  double decode_cpu_ms = 0, convert_cpu_ms = 0, snapshot_cpu_ms = 0;
  long page_faults = 0;  // minor faults during the apply
};

// The response as gRPC hands it to the xDS client: a chain of slices, one per HTTP/2 DATA frame
// (16 KiB, the default SETTINGS_MAX_FRAME_SIZE).
grpc::ByteBuffer as_received(const std::string& wire) {
  constexpr std::size_t kFrame = 16 * 1024;
  std::vector<grpc::Slice> slices;
  for (std::size_t at = 0; at < wire.size(); at += kFrame)
    slices.emplace_back(wire.data() + at, std::min(kFrame, wire.size() - at));
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The measured work, as XdsClient does it per response: decode the response across its slices,
// apply it to a fresh store, build the first snapshot.
bool apply_initial(const grpc::ByteBuffer& received, Applied& out) {
  auto store = xds::ResourceStore::create({});
  if (!store) return false;
  out.store = std::make_unique<xds::ResourceStore>(std::move(*store));
  long faults0 = minor_faults();
  double cpu0 = process_cpu_s();
  auto t0 = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point t_parsed, t_applied;
  double cpu_parsed = 0, cpu_applied = 0;
  {
    std::vector<grpc::Slice> slices;
    if (!received.Dump(&slices).ok()) return false;  // references, no copy
    std::vector<std::string_view> segments;
    for (const auto& slice : slices)
      segments.emplace_back(reinterpret_cast<const char*>(slice.begin()), slice.size());
    auto resp = xds::DecodedResponse::decode(segments);
    if (!resp || !resp->in_place()) return false;
    t_parsed = std::chrono::steady_clock::now();
    cpu_parsed = process_cpu_s();
    auto outcome = out.store->apply(resp->view());
    t_applied = std::chrono::steady_clock::now();
    cpu_applied = process_cpu_s();
    if (!outcome.rejected.empty()) {
      std::fprintf(stderr, "rejected: %s\n", outcome.error_message().c_str());
      return false;
    }
    auto built = out.store->build();
    if (!built) return false;
    out.snapshot = *built;
  }
  auto t1 = std::chrono::steady_clock::now();
  out.cpu_s = process_cpu_s() - cpu0;
  out.page_faults = minor_faults() - faults0;
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  out.wall_s = std::chrono::duration<double>(t1 - t0).count();
  out.decode_ms = ms(t_parsed - t0);
  out.convert_ms = ms(t_applied - t_parsed);
  out.snapshot_ms = ms(t1 - t_applied);
  out.decode_cpu_ms = (cpu_parsed - cpu0) * 1000.0;
  out.convert_cpu_ms = (cpu_applied - cpu_parsed) * 1000.0;
  out.snapshot_cpu_ms = (cpu0 + out.cpu_s - cpu_applied) * 1000.0;
  return true;
}

// A floor for the apply on this machine: process CPU time to fault in `kib` of fresh anonymous
// memory, one write per 4 KiB page — what the state's own pages cost to touch the first time,
// however they are filled. (On the 2-vCPU test VM a first touch costs 5-17 us.) -1 if no memory.
double first_touch_cpu_s(long kib) {
  std::size_t bytes = static_cast<std::size_t>(std::max(kib, 0L)) * 1024;
  if (bytes == 0) return 0;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -1;
  double c0 = process_cpu_s();
  auto* bytes_at = static_cast<volatile char*>(p);
  for (std::size_t at = 0; at < bytes; at += 4096) bytes_at[at] = 1;
  double spent = process_cpu_s() - c0;
  munmap(p, bytes);
  return spent;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(int workloads, int services, int repeat) {
  std::string wire = make_response(workloads, services);
  // Already there when the apply starts, and kept until the memory is measured after it.
  grpc::ByteBuffer received = as_received(wire);
  meshnode::base::release_free_memory();
  long before = rss_kib();
  Applied first;
  if (!apply_initial(received, first)) return 1;
  long peak = rss_kib();
  meshnode::base::release_free_memory();
  long after = rss_kib();
  received.Clear();
  // Further repetitions (--repeat): CPU only; memory is the first one's, in a fresh process.
  std::vector<double> cpus{first.cpu_s};
  std::vector<double> walls{first.wall_s};
  for (int r = 1; r < repeat; ++r) {
    Applied again;
    if (!apply_initial(as_received(wire), again)) return 1;
    cpus.push_back(again.cpu_s);
    walls.push_back(again.wall_s);
  }
  auto& store = first.store;
  auto& snapshot = first.snapshot;
  // Steady state: istiod then pushes small deltas (one pod changed); each still gets its snapshot.
  // Median of 21 deltas: a new pod, an update of an existing pod, a removal, in turn.
  std::vector<double> delta_wall, delta_cpu;
  for (int k = 0; k < 21; ++k) {
    discovery::DeltaDiscoveryResponse delta;
    delta.set_type_url(std::string(xds::kAddressType));
    int pod = k % 3 == 0 ? workloads + k : k * 997 % workloads;
    auto a = workload(pod, services);
    if (k % 3 == 2) {
      delta.add_removed_resources(a.workload().uid());
    } else {
      auto* r = delta.add_resources();
      r->set_name(a.workload().uid());
      r->set_version("2");
      a.mutable_workload()->set_canonical_revision("v2");
      r->mutable_resource()->PackFrom(a);
    }
    double c0 = process_cpu_s();
    auto d0 = std::chrono::steady_clock::now();
    auto outcome = store->apply(delta);
    if (!outcome.rejected.empty() || !outcome.changed()) return 1;
    auto built = store->build();
    if (!built) return 1;
    snapshot = *built;
    delta_wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - d0).count());
    delta_cpu.push_back((process_cpu_s() - c0) * 1000.0);
  }
  double delta_ms = median(delta_wall);
  double delta_cpu_ms = median(delta_cpu);
  double secs = first.wall_s;
  double cpu = first.cpu_s;
  double cpu_median = median(cpus);
  double per_workload = (after - before) * 1024.0 / workloads;
  double touch = first_touch_cpu_s(after - before);
  std::printf(
      "workloads=%d services=%d repeat=%d response_bytes=%zu apply_s=%.3f apply_cpu_s=%.3f cpu_s_per_100k=%.3f "
      "repeat_median_cpu_s_per_100k=%.3f "
      "rss_growth_kib=%ld "
      "bytes_per_workload=%.0f peak_growth_kib=%ld snapshot_workloads=%zu (decode_ms=%.0f convert_ms=%.0f "
      "snapshot_ms=%.0f) one_pod_delta_ms=%.2f one_pod_delta_cpu_ms=%.2f decode_cpu_ms=%.0f convert_cpu_ms=%.0f "
      "snapshot_cpu_ms=%.0f first_touch_cpu_s_per_100k=%.3f page_faults=%ld\n",
      workloads, services, repeat, wire.size(), secs, cpu, cpu * 100000.0 / workloads,
      cpu_median * 100000.0 / workloads, after - before, per_workload,
      peak - before, snapshot->workloads().size(), first.decode_ms, first.convert_ms, first.snapshot_ms, delta_ms,
      delta_cpu_ms, first.decode_cpu_ms, first.convert_cpu_ms, first.snapshot_cpu_ms, touch * 100000.0 / workloads, first.page_faults);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::pair<int, int>> sizes;
  int repeat = 1;
  int i = 1;
  if (argc > 2 && std::string_view(argv[1]) == "--repeat") {
    repeat = std::max(1, std::atoi(argv[2]));
    i = 3;
  }
  for (; i + 1 < argc; i += 2) sizes.emplace_back(std::atoi(argv[i]), std::atoi(argv[i + 1]));
  if (sizes.empty()) sizes = {{10000, 1000}, {100000, 10000}};
  for (auto [w, s] : sizes) {
    if (int rc = run(w, s, repeat); rc != 0) return rc;
  }
  return 0;
}
