// Decoding what a real API server sends, in both encodings, and refusing what it never sends.
#include <gtest/gtest.h>

#include "fakes/kube_objects.hpp"
#include "kube/codec.hpp"
#include "kube/http.hpp"

namespace meshnode::kube {
namespace {

using fakes::PodFacts;

PodFacts sample() {
  PodFacts f;
  f.labels["istio.io/dataplane-mode"] = "ambient";
  f.annotations["sidecar.istio.io/status"] = "{\"initContainers\":[\"istio-init\"]}";
  f.ips = {"10.244.1.17", "fd00:10:244:1::17"};
  f.deletion_timestamp = 1767950000;
  return f;
}

void expect_sample(const Pod& pod) {
  const PodFacts f = sample();
  EXPECT_EQ(pod.metadata.name, f.name);
  EXPECT_EQ(pod.metadata.namespace_, f.namespace_);
  EXPECT_EQ(pod.metadata.uid, f.uid);
  EXPECT_EQ(pod.metadata.resource_version, f.resource_version);
  ASSERT_TRUE(pod.metadata.deletion_timestamp.has_value());
  EXPECT_EQ(pod.metadata.deletion_timestamp->time_since_epoch().count(), 1767950000);
  ASSERT_EQ(pod.metadata.labels.size(), 3u);
  EXPECT_EQ(*pod.metadata.labels.find("istio.io/dataplane-mode"), "ambient");
  EXPECT_EQ(*pod.metadata.labels.find("app"), "web");
  EXPECT_NE(pod.metadata.annotations.find("sidecar.istio.io/status"), nullptr);
  EXPECT_EQ(pod.metadata.annotations.find("absent"), nullptr);
  EXPECT_EQ(pod.service_account_name, "web");
  EXPECT_EQ(pod.node_name, "node-1");
  EXPECT_FALSE(pod.host_network);
  EXPECT_EQ(pod.phase, "Running");
  EXPECT_EQ(pod.pod_ips, (std::vector<std::string>{"10.244.1.17", "fd00:10:244:1::17"}));
}

TEST(KubeCodec, EncodingFromContentType) {
  EXPECT_EQ(encoding_of("application/vnd.kubernetes.protobuf").value(), Encoding::kProtobuf);
  EXPECT_EQ(encoding_of("application/vnd.kubernetes.protobuf;stream=watch").value(), Encoding::kProtobuf);
  EXPECT_EQ(encoding_of("application/json; charset=utf-8").value(), Encoding::kJson);
  EXPECT_FALSE(encoding_of("text/html").has_value());
  EXPECT_FALSE(encoding_of("").has_value());
}

TEST(KubeCodec, ProtobufPodWithEveryFieldTheDecoderSkips) {
  auto pod = decode_object<Pod>(Encoding::kProtobuf, fakes::protobuf_envelope("Pod", fakes::pod_proto(sample())));
  ASSERT_TRUE(pod.has_value()) << pod.error().message();
  expect_sample(*pod);
}

TEST(KubeCodec, JsonPodAsTheApiServerWritesIt) {
  auto pod = decode_object<Pod>(Encoding::kJson, fakes::pod_json(sample()).dump());
  ASSERT_TRUE(pod.has_value()) << pod.error().message();
  expect_sample(*pod);
}

TEST(KubeCodec, BothEncodingsDecodeToTheSamePod) {
  for (bool host_network : {false, true}) {
    PodFacts f = sample();
    f.host_network = host_network;
    f.phase = "Succeeded";
    auto a = decode_object<Pod>(Encoding::kProtobuf, fakes::protobuf_envelope("Pod", fakes::pod_proto(f)));
    auto b = decode_object<Pod>(Encoding::kJson, fakes::pod_json(f).dump());
    ASSERT_TRUE(a && b);
    EXPECT_EQ(*a, *b);
    EXPECT_EQ(a->host_network, host_network);
  }
}

TEST(KubeCodec, PodIpFallsBackToStatusPodIp) {
  auto j = fakes::pod_json(sample());
  j["status"].erase("podIPs");
  auto pod = decode_object<Pod>(Encoding::kJson, j.dump());
  ASSERT_TRUE(pod);
  EXPECT_EQ(pod->pod_ips, std::vector<std::string>{"10.244.1.17"});
}

TEST(KubeCodec, ProtobufListKeepsGoodItemsAndSkipsABadOne) {
  PodFacts a = sample(), b = sample();
  b.name = "web-2";
  b.uid = "uid-2";
  PodFacts no_uid = sample();
  no_uid.uid.clear();
  const std::string garbage("\x0a\xff\xff\xff\x0f", 5);  // metadata length past the end
  auto list = decode_list<Pod>(Encoding::kProtobuf,
                               fakes::protobuf_list("PodList", {fakes::pod_proto(a), garbage, fakes::pod_proto(no_uid),
                                                                fakes::pod_proto(b)},
                                                    "777", "token-1"));
  ASSERT_TRUE(list.has_value()) << list.error().message();
  EXPECT_EQ(list->metadata.resource_version, "777");
  EXPECT_EQ(list->metadata.continue_token, "token-1");
  ASSERT_EQ(list->items.size(), 2u);
  EXPECT_EQ(list->skipped, 2u);
  EXPECT_EQ(list->items[1].metadata.name, "web-2");
}

TEST(KubeCodec, JsonListKeepsGoodItemsAndSkipsABadOne) {
  nlohmann::json bad = fakes::pod_json(sample());
  bad["metadata"]["labels"] = nlohmann::json::array({1, 2});  // not a map
  nlohmann::json list{{"kind", "PodList"},
                      {"apiVersion", "v1"},
                      {"metadata", {{"resourceVersion", "900"}, {"continue", "c"}, {"remainingItemCount", 3}}},
                      {"items", {fakes::pod_json(sample()), bad, 42}}};
  auto decoded = decode_list<Pod>(Encoding::kJson, list.dump());
  ASSERT_TRUE(decoded.has_value()) << decoded.error().message();
  EXPECT_EQ(decoded->items.size(), 1u);
  EXPECT_EQ(decoded->skipped, 2u);
  EXPECT_EQ(decoded->metadata.remaining_item_count, 3);
}

TEST(KubeCodec, Namespaces) {
  auto a = decode_list<Namespace>(
      Encoding::kProtobuf,
      fakes::protobuf_list("NamespaceList", {fakes::namespace_proto("shop", {{"istio.io/dataplane-mode", "ambient"}}, "u1", "5")},
                           "6"));
  ASSERT_TRUE(a) << a.error().message();
  ASSERT_EQ(a->items.size(), 1u);
  EXPECT_EQ(a->items[0].metadata.name, "shop");
  EXPECT_EQ(a->items[0].metadata.namespace_, "");
  EXPECT_EQ(*a->items[0].metadata.labels.find("istio.io/dataplane-mode"), "ambient");
  EXPECT_EQ(a->items[0].phase, "Active");
  auto b = decode_object<Namespace>(
      Encoding::kJson, fakes::namespace_json("shop", {{"istio.io/dataplane-mode", "ambient"}}, "u1", "5").dump());
  ASSERT_TRUE(b);
  EXPECT_EQ(a->items[0], *b);
}

TEST(KubeCodec, ProtobufWatchEvents) {
  const auto pod = fakes::protobuf_envelope("Pod", fakes::pod_proto(sample()));
  for (auto [name, type] : {std::pair{"ADDED", EventType::kAdded}, {"MODIFIED", EventType::kModified},
                            {"DELETED", EventType::kDeleted}}) {
    const auto frame = fakes::protobuf_watch_frame(name, pod);
    auto event = decode_watch_event<Pod>(Encoding::kProtobuf, std::string_view(frame).substr(4));
    ASSERT_TRUE(event) << event.error().message();
    EXPECT_EQ(event->type, type);
    expect_sample(event->object);
  }
}

TEST(KubeCodec, BookmarkCarriesOnlyTheResourceVersion) {
  nlohmann::json bookmark{{"kind", "Pod"}, {"apiVersion", "v1"},
                          {"metadata", {{"resourceVersion", "12345"},
                                        {"annotations", {{"k8s.io/initial-events-end", "true"}}}}}};
  auto j = decode_watch_event<Pod>(Encoding::kJson, fakes::json_watch_line("BOOKMARK", bookmark));
  ASSERT_TRUE(j) << j.error().message();
  EXPECT_EQ(j->type, EventType::kBookmark);
  EXPECT_EQ(j->object.metadata.resource_version, "12345");

  // Pod{metadata(1){resourceVersion(6): "12345"}}, as the watch cache writes a bookmark.
  std::string meta = std::string("\x32\x05", 2) + "12345";
  std::string pod = std::string("\x0a", 1) + static_cast<char>(meta.size()) + meta;
  const auto frame = fakes::protobuf_watch_frame("BOOKMARK", fakes::protobuf_envelope("Pod", pod));
  auto p = decode_watch_event<Pod>(Encoding::kProtobuf, std::string_view(frame).substr(4));
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->type, EventType::kBookmark);
  EXPECT_EQ(p->object.metadata.resource_version, "12345");
}

TEST(KubeCodec, ErrorEventCarriesTheExpiredStatus) {
  const auto frame =
      fakes::protobuf_watch_frame("ERROR", fakes::protobuf_status(410, "Expired", "too old resource version: 5 (20)"));
  auto p = decode_watch_event<Pod>(Encoding::kProtobuf, std::string_view(frame).substr(4));
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->type, EventType::kError);
  EXPECT_EQ(p->status.code, 410);
  EXPECT_EQ(p->status.reason, "Expired");
  EXPECT_TRUE(is_expired(p->status));

  nlohmann::json status{{"kind", "Status"}, {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
                        {"status", "Failure"}, {"message", "too old resource version: 5 (20)"},
                        {"reason", "Expired"}, {"code", 410}};
  auto j = decode_watch_event<Pod>(Encoding::kJson, fakes::json_watch_line("ERROR", status));
  ASSERT_TRUE(j);
  EXPECT_EQ(j->status, p->status);
}

TEST(KubeCodec, StatusBodiesOfRefusals) {
  auto s = decode_status(Encoding::kProtobuf, fakes::protobuf_status(404, "NotFound", "pods \"x\" not found"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->code, 404);
  EXPECT_EQ(s->message, "pods \"x\" not found");
  // A list request answered with a Status names the Status, not a kind mismatch.
  auto list = decode_list<Pod>(Encoding::kProtobuf, fakes::protobuf_status(410, "Expired", "continue too old"));
  ASSERT_FALSE(list);
  EXPECT_NE(list.error().context.find("Expired"), std::string::npos) << list.error().context;
}

// --- garbage: every broken input is a clear error, never a crash ---

TEST(KubeCodecGarbage, MistypedKindIsAnErrorNotAThrow) {
  // Found by kube_fuzz: json::value("kind", "") throws type_error on a non-string kind.
  const std::string body = R"({"kind":{"name":"x","kind":"pods"},"code":176})";
  auto s = decode_status(Encoding::kJson, body);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().context.find("not a Status"), std::string::npos) << s.error().context;
  EXPECT_FALSE(decode_object<Pod>(Encoding::kJson, body));
  EXPECT_FALSE(decode_list<Pod>(Encoding::kJson, body));
  EXPECT_FALSE(decode_watch_event<Pod>(Encoding::kJson, R"({"type":"ERROR","object":)" + body + "}"));
}

TEST(KubeCodecGarbage, WrongOrMissingPrefix) {
  auto a = decode_object<Pod>(Encoding::kProtobuf, "{\"kind\":\"Pod\"}");
  ASSERT_FALSE(a);
  EXPECT_NE(a.error().context.find("k8s\\0"), std::string::npos) << a.error().context;
  EXPECT_NE(a.error().context.find("7b 22 6b 69"), std::string::npos) << a.error().context;
  EXPECT_FALSE(decode_object<Pod>(Encoding::kProtobuf, ""));
  EXPECT_FALSE(decode_object<Pod>(Encoding::kProtobuf, std::string("k8s", 3)));
  auto empty = decode_object<Pod>(Encoding::kProtobuf, std::string("k8s\0", 4));
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().context.find("empty body"), std::string::npos);
  EXPECT_FALSE(decode_object<Pod>(Encoding::kProtobuf, std::string("k8s\1", 4) + "xxxx"));
}

TEST(KubeCodecGarbage, TruncatedEnvelopesAndObjects) {
  const auto body = fakes::protobuf_envelope("Pod", fakes::pod_proto(sample()));
  // Every prefix of a valid body either fails cleanly or (when the cut falls on a field boundary
  // of the outer message) decodes something that is then rejected for missing fields.
  for (std::size_t n = 0; n < body.size(); n += 7) {
    auto r = decode_object<Pod>(Encoding::kProtobuf, std::string_view(body).substr(0, n));
    if (r) {
      EXPECT_FALSE(r->metadata.uid.empty());
    }
  }
  const auto frame = fakes::protobuf_watch_frame("MODIFIED", body);
  for (std::size_t n = 4; n < frame.size(); n += 11) {
    auto r = decode_watch_event<Pod>(Encoding::kProtobuf, std::string_view(frame).substr(4, n - 4));
    EXPECT_FALSE(r.has_value()) << n;
  }
}

TEST(KubeCodecGarbage, WrongKindsAndTypes) {
  const auto ns = fakes::protobuf_envelope("Namespace", fakes::namespace_proto("a", {}, "u", "1"));
  auto r = decode_object<Pod>(Encoding::kProtobuf, ns);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().context.find("expected kind Pod"), std::string::npos);
  const auto frame = fakes::protobuf_watch_frame("EXPLODED", fakes::protobuf_envelope("Pod", fakes::pod_proto(sample())));
  auto e = decode_watch_event<Pod>(Encoding::kProtobuf, std::string_view(frame).substr(4));
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().context.find("EXPLODED"), std::string::npos);
  EXPECT_FALSE(decode_watch_event<Pod>(Encoding::kJson, "{\"type\":\"ADDED\"}"));
  EXPECT_FALSE(decode_watch_event<Pod>(Encoding::kJson, "{\"type\":\"ADDED\",\"object\":[]}"));
  EXPECT_FALSE(decode_watch_event<Pod>(Encoding::kJson, "[1,2"));
  EXPECT_FALSE(decode_list<Pod>(Encoding::kJson, "{\"kind\":\"PodList\",\"items\":{}}"));
  auto ts = fakes::pod_json(sample());
  ts["metadata"]["deletionTimestamp"] = "yesterday";
  EXPECT_FALSE(decode_object<Pod>(Encoding::kJson, ts.dump()));
  auto unsupported = fakes::protobuf_envelope("Pod", "x");
  unsupported += std::string("\x1a\x04gzip", 6);  // contentEncoding
  auto g = decode_object<Pod>(Encoding::kProtobuf, unsupported);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().context.find("contentEncoding"), std::string::npos);
}

TEST(WatchFramerTest, ProtobufFramesSplitAnywhere) {
  std::string stream;
  for (int i = 0; i < 3; ++i) {
    PodFacts f = sample();
    f.resource_version = std::to_string(100 + i);
    stream += fakes::protobuf_watch_frame("MODIFIED", fakes::protobuf_envelope("Pod", fakes::pod_proto(f)));
  }
  for (std::size_t chunk : {1u, 3u, 4u, 5u, 97u, 100000u}) {
    WatchFramer framer(Encoding::kProtobuf);
    std::vector<std::string> versions;
    for (std::size_t at = 0; at < stream.size(); at += chunk) {
      framer.feed(std::string_view(stream).substr(at, chunk));
      while (true) {
        auto frame = framer.next();
        ASSERT_TRUE(frame);
        if (!*frame) break;
        auto e = decode_watch_event<Pod>(Encoding::kProtobuf, **frame);
        ASSERT_TRUE(e) << e.error().message();
        versions.push_back(e->object.metadata.resource_version);
      }
    }
    EXPECT_EQ(versions, (std::vector<std::string>{"100", "101", "102"})) << "chunk " << chunk;
    EXPECT_TRUE(framer.finish());
  }
}

TEST(WatchFramerTest, OversizedLengthAndTruncatedFrame) {
  WatchFramer framer(Encoding::kProtobuf, 1024);
  framer.feed(std::string("\x00\x00\x04\x01", 4));  // 1025 bytes announced
  auto r = framer.next();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().context.find("1025 bytes exceeds the limit of 1024"), std::string::npos) << r.error().context;

  WatchFramer huge(Encoding::kProtobuf);
  huge.feed(std::string("\xff\xff\xff\xff", 4));
  EXPECT_FALSE(huge.next());

  WatchFramer cut(Encoding::kProtobuf);
  cut.feed(std::string("\x00\x00\x00\x10", 4) + "abc");
  auto none = cut.next();
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->has_value());
  auto finished = cut.finish();
  ASSERT_FALSE(finished);
  EXPECT_NE(finished.error().context.find("truncated watch frame"), std::string::npos);
}

// Found by kube_fuzz: a JSON line that arrives whole, newline included, was returned however long
// it was; only a line still waiting for its newline was bounded.
TEST(WatchFramerTest, JsonLineOverTheLimitIsRefusedAlsoWhenItArrivesWhole) {
  WatchFramer framer(Encoding::kJson, 64);
  framer.feed(std::string(65, 'x') + "\n{\"b\":2}\n");
  auto r = framer.next();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().context.find("longer than 64 bytes"), std::string::npos) << r.error().context;

  WatchFramer exact(Encoding::kJson, 64);
  exact.feed(std::string(64, 'x') + "\n");
  auto ok = exact.next();
  ASSERT_TRUE(ok && *ok);
  EXPECT_EQ((*ok)->size(), 64u);
}

TEST(WatchFramerTest, JsonLines) {
  WatchFramer framer(Encoding::kJson, 64);
  framer.feed("{\"a\":1}\n\n{\"b\"");
  auto a = framer.next();
  ASSERT_TRUE(a && *a);
  EXPECT_EQ(**a, "{\"a\":1}");
  auto b = framer.next();
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->has_value());
  framer.feed(":2}\r\n");
  auto c = framer.next();
  ASSERT_TRUE(c && *c);
  EXPECT_EQ(**c, "{\"b\":2}");
  EXPECT_TRUE(framer.finish());
  framer.feed(std::string(100, 'x'));
  EXPECT_FALSE(framer.next());
}

TEST(KubeHttpCategory, CarriesTheStatus) {
  base::Error e{base::Errc::kProtocol, "x", std::error_code(410, http_category())};
  EXPECT_EQ(http_status(e), 410);
  EXPECT_EQ(http_status(base::Error{base::Errc::kIo, "x", std::make_error_code(std::errc::io_error)}), 0);
}

}  // namespace
}  // namespace meshnode::kube
