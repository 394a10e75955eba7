// kube_bench: the node agent's Kubernetes costs (issue 13).
//  1. Watch decode cost per 1,000 realistic pod events, protobuf vs JSON in the same run: the
//     real path (WatchFramer over 16 KiB chunks as libcurl delivers them + decode_watch_event),
//     median of --reps runs, and the JSON/protobuf ratio.
//  2. Memory of the informer cache against the fake API server loaded with --pods pods spread
//     over --nodes nodes: the node-filtered cache the agent runs in production
//     (spec.nodeName=node-1: pods/nodes of them) and an unfiltered cache of all of them, each
//     with the agent's annotation filter; heap in use (mallinfo2) and RSS, deltas from before
//     the informer started.
// Usage: kube_bench [--reps N] [--pods N] [--nodes N] [--no-cache]
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fakes/kube_api.hpp"
#include "fakes/kube_objects.hpp"
#include "kube/codec.hpp"
#include "kube/enrollment.hpp"
#include "kube/informer.hpp"

namespace {

using namespace meshnode;
using Clock = std::chrono::steady_clock;

fakes::PodFacts facts_for(int i) {
  fakes::PodFacts f;
  f.name = "web-7d4b9c8f5d-" + std::to_string(10000 + i);
  f.uid = "6f1e2d3c-4b5a-4978-8695-" + std::to_string(100000000000 + i);
  f.resource_version = std::to_string(50000 + i);
  f.ips = {"10.244." + std::to_string(i / 250) + "." + std::to_string(i % 250)};
  f.labels["app"] = "web-" + std::to_string(i % 10);
  f.labels["istio.io/dataplane-mode"] = "ambient";
  return f;
}

struct DecodeResult {
  double median_us = 0;
  std::size_t bytes = 0;
};

DecodeResult measure_decode(kube::Encoding encoding, const std::string& stream, int events, int reps) {
  std::vector<double> runs;
  std::size_t checksum = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    kube::WatchFramer framer(encoding);
    int decoded = 0;
    for (std::size_t at = 0; at < stream.size(); at += 16384) {
      framer.feed(std::string_view(stream).substr(at, 16384));
      while (true) {
        auto frame = framer.next();
        if (!frame || !*frame) break;
        auto event = kube::decode_watch_event<kube::Pod>(encoding, **frame);
        if (!event) {
          std::fprintf(stderr, "decode failed: %s\n", event.error().message().c_str());
          std::exit(1);
        }
        checksum += event->object.pod_ips.size() + event->object.metadata.labels.size();
        ++decoded;
      }
    }
    runs.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (decoded != events) {
      std::fprintf(stderr, "decoded %d of %d events\n", decoded, events);
      std::exit(1);
    }
  }
  std::sort(runs.begin(), runs.end());
  if (checksum == 0) std::exit(1);  // keeps the work observable
  return {runs[runs.size() / 2], stream.size()};
}

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

std::size_t heap_in_use() {
  malloc_trim(0);
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

struct CacheResult {
  std::size_t pods = 0;
  double heap_mib = 0;
  double rss_mib = 0;
  double sync_ms = 0;
};

CacheResult measure_cache(const std::string& url, const std::string& field_selector) {
  const std::size_t heap0 = heap_in_use();
  const long rss0 = rss_kib();
  kube::InformerOptions<kube::Pod> options;
  options.field_selector = field_selector;
  options.transform = kube::keep_agent_annotations;
  options.index = kube::pod_ip_index;
  const auto t0 = Clock::now();
  auto informer = kube::PodInformer::start(kube::ClusterConfig{.server = url}, options);
  if (!informer || !(*informer)->wait_for_sync(std::chrono::minutes(5))) {
    std::fprintf(stderr, "informer did not sync\n");
    std::exit(1);
  }
  CacheResult r;
  r.sync_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  r.pods = (*informer)->size();
  r.heap_mib = static_cast<double>(heap_in_use() - heap0) / (1024.0 * 1024.0);
  r.rss_mib = static_cast<double>(rss_kib() - rss0) / 1024.0;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 15, pods = 10000, nodes = 100;
  bool cache = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--pods" && i + 1 < argc) pods = std::atoi(argv[++i]);
    else if (a == "--nodes" && i + 1 < argc) nodes = std::atoi(argv[++i]);
    else if (a == "--no-cache") cache = false;
    else {
      std::fprintf(stderr, "usage: %s [--reps N] [--pods N] [--nodes N] [--no-cache]\n", argv[0]);
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);

  constexpr int kEvents = 1000;
  std::string proto_stream, json_stream;
  for (int i = 0; i < kEvents; ++i) {
    const auto f = facts_for(i);
    proto_stream += fakes::protobuf_watch_frame("MODIFIED", fakes::protobuf_envelope("Pod", fakes::pod_proto(f)));
    json_stream += fakes::json_watch_line("MODIFIED", fakes::pod_json(f));
  }
  measure_decode(kube::Encoding::kProtobuf, proto_stream, kEvents, 2);  // warm-up
  const auto pb = measure_decode(kube::Encoding::kProtobuf, proto_stream, kEvents, reps);
  const auto js = measure_decode(kube::Encoding::kJson, json_stream, kEvents, reps);
  std::printf("watch decode, %d realistic pod MODIFIED events (median of %d runs)\n", kEvents, reps);
  std::printf("  %-9s %10s %12s %12s %10s\n", "encoding", "bytes/evt", "us/1000 evt", "us/event", "MB/s");
  for (auto [name, r] : {std::pair{"protobuf", pb}, std::pair{"json", js}}) {
    std::printf("  %-9s %10zu %12.0f %12.2f %10.1f\n", name, r.bytes / kEvents, r.median_us, r.median_us / kEvents,
                static_cast<double>(r.bytes) / r.median_us);
  }
  std::printf("  ratio json/protobuf: time %.2fx, bytes %.2fx\n", js.median_us / pb.median_us,
              static_cast<double>(js.bytes) / static_cast<double>(pb.bytes));

  if (!cache) return 0;
  std::string tmpl = (std::filesystem::temp_directory_path() / "meshnode-kube-bench-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return 1;
  {
    auto fake = fakes::FakeKubeApi::start({tmpl});
    const nlohmann::json load{{"template", fakes::pod_json(facts_for(0))}, {"count", pods}, {"nodes", nodes},
                              {"namespace", "bench"}, {"prefix", "web-"}};
    const auto t0 = Clock::now();
    const auto reply = fake->call("POST", "/fake/load", load.dump());
    if (reply.status != 200) {
      std::fprintf(stderr, "load failed: %s\n", reply.body.c_str());
      return 1;
    }
    std::printf("\ninformer cache (fake API server loaded with %d pods over %d nodes in %.1f s; protobuf; "
                "annotation filter on)\n",
                pods, nodes, std::chrono::duration<double>(Clock::now() - t0).count());
    std::printf("  %-32s %8s %10s %10s %10s %10s\n", "cache", "pods", "heap MiB", "KiB/pod", "RSS MiB", "sync ms");
    for (auto [name, selector] : {std::pair{"node-filtered (spec.nodeName)", "spec.nodeName=node-1"},
                                  std::pair{"all pods (no field selector)", ""}}) {
      const auto r = measure_cache(fake->url(), selector);
      std::printf("  %-32s %8zu %10.2f %10.2f %10.1f %10.0f\n", name, r.pods, r.heap_mib,
                  r.heap_mib * 1024.0 / static_cast<double>(std::max<std::size_t>(r.pods, 1)), r.rss_mib, r.sync_ms);
    }
  }
  std::filesystem::remove_all(tmpl);
  return 0;
}
