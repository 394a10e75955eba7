// libFuzzer target for meshnode-cni's inputs (CNI spec 1.0 §Parameters, §Network configuration,
// §Result, §Error; cni/): the CNI_* environment, the network configuration on stdin (with the
// chained prevResult) and the node agent's HTTP reply, through the same pure steps main() runs:
// parse_command → parse_request → plan → parse_response → conclude. Checks beyond "no crash":
// - an accepted request keeps the documented CNI_CONTAINERID / CNI_IFNAME / CNI_NETNS rules;
// - every stdout is what the spec allows: nothing (DEL), a JSON error object with code and
//   cniVersion (exit ≠ 0), or on ADD success prevResult with the config's cniVersion — byte for
//   byte when prevResult already carried it;
// - DEL always exits 0 (it must be idempotent), whatever the agent said;
// - the event the plugin posts is accepted by the agent's parser of the same schema, and says what
//   the request said (the one-schema promise of nodeapi/plugin_event.hpp).
//
// Input: "NAME=value" lines (the environment) up to the first NUL, then stdin up to the next NUL,
// then the agent's raw HTTP reply.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>

#include "cni/http.hpp"
#include "cni/plugin.hpp"
#include "cni/request.hpp"
#include "fuzz_check.hpp"
#include "nodeapi/plugin_event.hpp"

namespace {

namespace cni = meshnode::cni;
namespace nodeapi = meshnode::nodeapi;
using Json = nlohmann::ordered_json;

std::string_view take(std::string_view& in) {
  const auto nul = in.find('\0');
  const std::string_view head = in.substr(0, nul);
  in = nul == std::string_view::npos ? std::string_view() : in.substr(nul + 1);
  return head;
}

cni::Env env_of(std::string_view text) {
  cni::Env env;
  while (!text.empty()) {
    const std::string_view line = text.substr(0, text.find('\n'));
    text.remove_prefix(std::min(text.size(), line.size() + 1));
    const auto eq = line.find('=');
    if (eq != std::string_view::npos) env.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  return env;
}

/// `doc` with object keys compared as sets (the result moves cniVersion first).
nlohmann::json unordered(const Json& doc) {
  return nlohmann::json::parse(doc.dump(-1, ' ', false, Json::error_handler_t::replace));
}

/// What main() would print and return, checked against the spec.
void check_outcome(const cni::Outcome& out, cni::Command command, const cni::PluginConfig* config) {
  if (command == cni::Command::kDel) {
    FUZZ_CHECK(out.exit_code == 0 && out.stdout_text.empty(), "DEL must exit 0 with no output");
    return;
  }
  const Json doc = Json::parse(out.stdout_text, nullptr, false);
  if (out.exit_code != 0) {
    FUZZ_CHECK(doc.is_object() && doc["code"].is_number_integer() && doc["cniVersion"].is_string() &&
                   doc["msg"].is_string(),
               "failure without a CNI error object");
    return;
  }
  if (command != cni::Command::kAdd) {
    FUZZ_CHECK(out.stdout_text.empty(), "CHECK success prints nothing");
    return;
  }
  FUZZ_CHECK(config != nullptr && doc.is_object() && doc["cniVersion"] == config->cni_version,
             "ADD result without the config's cniVersion");
  if (config->prev_result.is_object()) {
    Json prev = config->prev_result;
    prev["cniVersion"] = config->cni_version;
    FUZZ_CHECK(unordered(doc) == unordered(prev), "ADD result is not prevResult");
    const auto v = config->prev_result.find("cniVersion");
    if (config->prev_result_text && v != config->prev_result.end() && *v == config->cni_version)
      FUZZ_CHECK(out.stdout_text == *config->prev_result_text, "prevResult not passed through byte for byte");
  }
}

void check_request(const cni::Request& r) {
  FUZZ_CHECK(!r.container_id.empty() && !r.ifname.empty() && r.ifname.size() < 16, "CNI_CONTAINERID/CNI_IFNAME");
  FUZZ_CHECK(r.command == cni::Command::kDel || !r.netns.empty(), "ADD/CHECK without CNI_NETNS");
  FUZZ_CHECK(cni::is_supported_version(r.config.cni_version), "unsupported cniVersion accepted");
  FUZZ_CHECK(!r.pod.ns.empty(), "empty pod namespace");
  if (r.config.prev_result_text) {
    FUZZ_CHECK(Json::parse(*r.config.prev_result_text, nullptr, false) == r.config.prev_result,
               "prevResult text is not the prevResult value");
  }
}

void check_event(const cni::Request& r, const cni::AgentCall& call) {
  FUZZ_CHECK(call.socket == r.config.agent_socket, "agent socket");
  const auto kind = r.command == cni::Command::kAdd   ? nodeapi::EventKind::kAdd
                    : r.command == cni::Command::kDel ? nodeapi::EventKind::kDel
                                                      : nodeapi::EventKind::kCheck;
  auto event = nodeapi::parse_plugin_event(call.body, kind);
  FUZZ_CHECK(event.has_value(), "the agent's parser refuses the plugin's event");
  FUZZ_CHECK(event->pod_name == r.pod.name && event->pod_namespace == r.pod.ns && event->netns == r.netns &&
                 event->container_id == r.container_id && event->ifname == r.ifname,
             "the event says something else than the request");
}

void check_reply(std::string_view bytes) {
  auto open = cni::parse_response(bytes, false);
  auto closed = cni::parse_response(bytes, true);
  if (open && *open) {
    FUZZ_CHECK(closed && *closed && (*closed)->status == (*open)->status && (*closed)->body == (*open)->body,
               "EOF changed a complete reply");
  }
  if (closed) FUZZ_CHECK(closed->has_value(), "at EOF a reply is complete or an error");
  if (closed && *closed) FUZZ_CHECK((*closed)->body.size() <= cni::kMaxResponseBytes, "reply over the limit");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  const cni::Env env = env_of(take(in));
  const std::string_view stdin_text = take(in);
  const std::string_view reply_bytes = in;
  check_reply(reply_bytes);

  auto command = cni::parse_command(env);
  if (!command) {
    check_outcome(cni::error_outcome(cni::Command::kVersion, command.error()), cni::Command::kVersion, nullptr);
    return 0;
  }
  if (*command == cni::Command::kVersion) {
    FUZZ_CHECK(Json::parse(cni::version_json())["supportedVersions"].size() == 4, "VERSION output");
    return 0;
  }
  auto request = cni::parse_request(*command, env, stdin_text);
  if (!request) {
    check_outcome(cni::error_outcome(*command, request.error()), *command, nullptr);
    return 0;
  }
  check_request(*request);
  auto next = cni::plan(*request);
  if (auto* done = std::get_if<cni::Outcome>(&next)) {
    check_outcome(*done, *command, &request->config);
    return 0;
  }
  check_event(*request, std::get<cni::AgentCall>(next));
  auto reply = cni::parse_response(reply_bytes, true);
  const meshnode::base::Result<cni::HttpReply> answer =
      reply && *reply ? meshnode::base::Result<cni::HttpReply>(**reply)
                      : meshnode::base::fail(meshnode::base::Errc::kIo, "no reply");
  check_outcome(cni::conclude(*request, answer), *command, &request->config);
  return 0;
}
