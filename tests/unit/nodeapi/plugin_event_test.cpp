#include "nodeapi/plugin_event.hpp"

#include <gtest/gtest.h>

#include <string>

namespace meshnode::nodeapi {
namespace {

TEST(PluginEvent, ReferenceBodyParses) {
  auto event = parse_plugin_event(
      R"({"Netns":"/var/run/netns/cni-1","PodName":"p","PodNamespace":"ns",
          "IPs":[{"Interface":0,"Address":{"IP":"10.244.0.7","Mask":"////AA=="},"Gateway":"10.244.0.1"},
                 {"Interface":null,"Address":{"IP":"fd00::7","Mask":"/////////////////////w=="}}]})",
      EventKind::kAdd);
  ASSERT_TRUE(event) << event.error().message();
  EXPECT_EQ(event->netns, "/var/run/netns/cni-1");
  EXPECT_EQ(event->pod_name, "p");
  EXPECT_EQ(event->pod_namespace, "ns");
  EXPECT_EQ(event->pod_uid, "ns/p");
  EXPECT_EQ(event->service_account, "default");
  ASSERT_EQ(event->ips.size(), 2u);
  EXPECT_EQ(event->ips[0].ip.to_string(), "10.244.0.7");
  EXPECT_EQ(event->ips[0].prefix_len, 24);
  EXPECT_EQ(event->ips[0].interface, 0);
  EXPECT_EQ(event->ips[0].gateway->to_string(), "10.244.0.1");
  EXPECT_FALSE(event->ips[1].interface.has_value());
  EXPECT_EQ(event->ips[1].prefix_len, 128);
}

TEST(PluginEvent, MeshnodeExtensionsAndUnknownFields) {
  auto event = parse_plugin_event(
      R"({"Netns":"/run/netns/x","PodName":"p","PodNamespace":"ns","PodUID":"1234-ab",
          "PodServiceAccount":"sa","Extra":{"a":1}})",
      EventKind::kAdd);
  ASSERT_TRUE(event) << event.error().message();
  EXPECT_EQ(event->pod_uid, "1234-ab");
  EXPECT_EQ(event->service_account, "sa");
  EXPECT_TRUE(event->ips.empty());
}

// Table: a bad body → the field the 400 must name.
TEST(PluginEvent, ValidationNamesTheBadField) {
  struct Case {
    const char* body;
    EventKind kind;
    const char* error_prefix;
  };
  const Case cases[] = {
      {"", EventKind::kAdd, "body: empty"},
      {"{", EventKind::kAdd, "body: not valid JSON"},
      {"[1]", EventKind::kAdd, "body: must be a JSON object"},
      {R"({"PodName":"p","PodNamespace":"ns"})", EventKind::kAdd, "Netns: missing or empty"},
      {R"({"Netns":"","PodName":"p","PodNamespace":"ns"})", EventKind::kAdd, "Netns: missing or empty"},
      {R"({"Netns":"netns/x","PodName":"p","PodNamespace":"ns"})", EventKind::kAdd, "Netns: must be an absolute"},
      {R"({"Netns":"/run/../etc","PodName":"p","PodNamespace":"ns"})", EventKind::kAdd, "Netns: must not contain .."},
      {R"({"Netns":7,"PodName":"p","PodNamespace":"ns"})", EventKind::kAdd, "Netns: must be a string"},
      {R"({"Netns":"/n","PodNamespace":"ns"})", EventKind::kAdd, "PodName: missing or empty"},
      {R"({"Netns":"/n","PodName":"a/b","PodNamespace":"ns"})", EventKind::kAdd, "PodName: contains"},
      {R"({"Netns":"/n","PodName":"p"})", EventKind::kDel, "PodNamespace: missing or empty"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"n s"})", EventKind::kAdd, "PodNamespace: contains"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","PodUID":5})", EventKind::kAdd, "PodUID: must be a string"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","IPs":{}})", EventKind::kAdd, "IPs: must be a list"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","IPs":[3]})", EventKind::kAdd, "IPs[0]: must be an object"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","IPs":[{}]})", EventKind::kAdd, "IPs[0].Address: missing"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","IPs":[{"Address":{"IP":"1.2.3.4"}},{"Address":{"IP":"x"}}]})",
       EventKind::kAdd, "IPs[1].Address.IP: not an IP address"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","IPs":[{"Address":{"IP":"1.2.3.4","Mask":"!!"}}]})",
       EventKind::kAdd, "IPs[0].Address.Mask: must be base64 of 4 bytes"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","IPs":[{"Address":{"IP":"1.2.3.4","Mask":"/////////////////////w=="}}]})",
       EventKind::kAdd, "IPs[0].Address.Mask: must be base64 of 4 bytes"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","IPs":[{"Address":{"IP":"1.2.3.4","Mask":"/wD/AA=="}}]})",
       EventKind::kAdd, "IPs[0].Address.Mask: netmask is not contiguous"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","IPs":[{"Address":{"IP":"1.2.3.4"},"Gateway":"g"}]})",
       EventKind::kAdd, "IPs[0].Gateway: not an IP address"},
      {R"({"Netns":"/n","PodName":"p","PodNamespace":"ns","IPs":[{"Interface":"0","Address":{"IP":"1.2.3.4"}}]})",
       EventKind::kAdd, "IPs[0].Interface: must be an integer"},
  };
  for (const Case& c : cases) {
    auto event = parse_plugin_event(c.body, c.kind);
    ASSERT_FALSE(event) << c.body;
    EXPECT_EQ(event.error().code, base::Errc::kInvalidArgument) << c.body;
    EXPECT_TRUE(event.error().context.starts_with(c.error_prefix)) << c.body << " → " << event.error().context;
  }
}

TEST(PluginEvent, DelAndCheckNeedNoNetns) {
  for (EventKind kind : {EventKind::kDel, EventKind::kCheck}) {
    auto event = parse_plugin_event(R"({"PodName":"p","PodNamespace":"ns","IPs":null})", kind);
    ASSERT_TRUE(event) << event.error().message();
    EXPECT_TRUE(event->netns.empty());
  }
}

TEST(PluginEvent, Base64Decode) {
  EXPECT_EQ(decode_base64("////AA=="), std::string("\xff\xff\xff\x00", 4));
  EXPECT_EQ(decode_base64("YWJj"), "abc");
  EXPECT_EQ(decode_base64("YWI="), "ab");
  EXPECT_EQ(decode_base64(""), "");
  EXPECT_FALSE(decode_base64("YWJ"));
  EXPECT_FALSE(decode_base64("Y=Jj"));
  EXPECT_FALSE(decode_base64("YW=j"));
  EXPECT_FALSE(decode_base64("YW\nj"));
  // Non-zero bits under the padding (RFC 4648 §3.5): "YWJ=" would also decode to "ab" (fuzz smoke
  // input "Netnsp==" decoded but re-encoded as "Netnsg==").
  EXPECT_FALSE(decode_base64("YWJ="));
  EXPECT_FALSE(decode_base64("Netnsp=="));
  EXPECT_EQ(decode_base64("Netnsg=="), std::string("\x35\xeb\x67\xb2", 4));
}

TEST(PluginEvent, Base64Encode) {
  EXPECT_EQ(encode_base64(""), "");
  EXPECT_EQ(encode_base64("f"), "Zg==");
  EXPECT_EQ(encode_base64("fo"), "Zm8=");
  EXPECT_EQ(encode_base64("foo"), "Zm9v");
  EXPECT_EQ(encode_base64("foobar"), "Zm9vYmFy");
}

// What meshnode-cni writes is what meshnode-agent reads: every field survives encode → parse, for
// each endpoint kind, with IPv4 and IPv6 addresses, with and without interface, mask and gateway.
TEST(PluginEvent, RoundTripKeepsEveryField) {
  PluginEvent event;
  event.netns = "/var/run/netns/cni-5f1e";
  event.pod_name = "web-7d9c";
  event.pod_namespace = "shop";
  event.pod_uid = "6b7e2a2c-1f0d-4c53-9a51-0c4b0f7d0e11";
  event.service_account = "web";
  event.container_id = "c0ffee";
  event.ifname = "eth0";
  event.ips = {
      PodIp{0, *base::IpAddr::parse("10.244.0.7"), 24, *base::IpAddr::parse("10.244.0.1")},
      PodIp{std::nullopt, *base::IpAddr::parse("fd00::7"), 64, std::nullopt},
      PodIp{3, *base::IpAddr::parse("198.19.1.5"), 32, std::nullopt},
      PodIp{std::nullopt, *base::IpAddr::parse("fd00::8"), std::nullopt, *base::IpAddr::parse("fd00::1")},
  };
  const std::string body = encode_plugin_event(event);
  for (EventKind kind : {EventKind::kAdd, EventKind::kDel, EventKind::kCheck}) {
    auto parsed = parse_plugin_event(body, kind);
    ASSERT_TRUE(parsed) << parsed.error().message() << "\n" << body;
    EXPECT_EQ(*parsed, event) << body;
  }
  // A DEL without netns, pod uid or service account comes back with the documented defaults.
  PluginEvent del;
  del.pod_name = "p";
  del.pod_namespace = "ns";
  auto parsed = parse_plugin_event(encode_plugin_event(del), EventKind::kDel);
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(parsed->netns, "");
  EXPECT_EQ(parsed->pod_uid, "ns/p");
  EXPECT_EQ(parsed->service_account, "default");
  EXPECT_TRUE(parsed->ips.empty());
}

}  // namespace
}  // namespace meshnode::nodeapi
