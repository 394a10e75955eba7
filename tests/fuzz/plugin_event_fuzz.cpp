// libFuzzer target for the plugin-event JSON schema (research §2.5; nodeapi/plugin_event), which
// meshnode-agent parses from every body POSTed to its plugin-event socket. Checks beyond "no crash":
// an accepted event keeps the documented rules (pod name and namespace 1..253 printable bytes
// without '/', absolute Netns without "..", required for ADD), and encode → parse gives the same
// event back (the plugin writes with encode_plugin_event, so what it sends is what the agent reads).
// base64 round-trips too. Byte 0 picks the endpoint (ADD, DEL, CHECK); the rest is the body.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fuzz_check.hpp"
#include "nodeapi/plugin_event.hpp"

namespace {

namespace nodeapi = meshnode::nodeapi;

void check_name(const std::string& name) {
  FUZZ_CHECK(!name.empty() && name.size() <= 253, "pod name/namespace length");
  for (unsigned char c : name) FUZZ_CHECK(c >= 0x21 && c <= 0x7e && c != '/', "pod name/namespace byte");
}

void check_event(const nodeapi::PluginEvent& event, nodeapi::EventKind kind) {
  check_name(event.pod_name);
  check_name(event.pod_namespace);
  FUZZ_CHECK(!event.pod_uid.empty() && !event.service_account.empty(), "defaults not applied");
  if (kind == nodeapi::EventKind::kAdd) FUZZ_CHECK(!event.netns.empty(), "ADD without a netns");
  if (!event.netns.empty()) {
    FUZZ_CHECK(event.netns.front() == '/', "relative netns");
    FUZZ_CHECK(event.netns.find("/../") == std::string::npos && !event.netns.ends_with("/.."), "netns with ..");
  }
  for (const auto& ip : event.ips) {
    if (ip.prefix_len) FUZZ_CHECK(*ip.prefix_len >= 0 && *ip.prefix_len <= (ip.ip.is_v4() ? 32 : 128), "prefix");
    if (ip.interface) FUZZ_CHECK(*ip.interface >= 0, "negative interface index");
  }
  const std::string body = nodeapi::encode_plugin_event(event);
  auto again = nodeapi::parse_plugin_event(body, kind);
  FUZZ_CHECK(again.has_value(), "the agent refuses what the plugin encodes");
  FUZZ_CHECK(*again == event, "encode -> parse differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const auto kind = static_cast<nodeapi::EventKind>(data[0] % 3);
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  if (auto event = nodeapi::parse_plugin_event(body, kind)) {
    check_event(*event, kind);
    // Each Interface index is the number the body carried, not a truncation of it.
    auto doc = nlohmann::json::parse(body);  // not const: operator[] inserts null for absent keys
    for (std::size_t i = 0; i < event->ips.size(); ++i) {
      const auto& itf = doc["IPs"][i]["Interface"];
      if (itf.is_number_integer()) FUZZ_CHECK(itf == *event->ips[i].interface, "Interface index truncated");
    }
  }

  if (auto bytes = nodeapi::decode_base64(body)) {
    FUZZ_CHECK(nodeapi::encode_base64(*bytes) == body, "base64 decode -> encode differs");
  }
  FUZZ_CHECK(nodeapi::decode_base64(nodeapi::encode_base64(body)) == std::string(body), "base64 round trip");
  return 0;
}
