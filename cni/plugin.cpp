#include "cni/plugin.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cni/event.hpp"

namespace meshnode::cni {

namespace {

using OrderedJson = nlohmann::ordered_json;
namespace level = spdlog::level;

/// Longest agent reason copied into `details` (a reason is a sentence, not a document).
constexpr std::size_t kMaxReason = 1024;

std::string_view verb(Command command) {
  switch (command) {
    case Command::kAdd:
      return "ADD";
    case Command::kDel:
      return "DEL";
    case Command::kCheck:
      return "CHECK";
    case Command::kVersion:
      break;
  }
  return "VERSION";
}

std::string pod_fields(const Request& r) {
  return "cmd=" + std::string(verb(r.command)) + " pod=" + r.pod.ns + "/" + r.pod.name + " uid=" + r.pod.uid +
         " container=" + r.container_id + " netns=" + r.netns;
}

std::string reason_of(const HttpReply& reply) {
  std::string_view body = reply.body;
  while (!body.empty() && std::isspace(static_cast<unsigned char>(body.back()))) body.remove_suffix(1);
  while (!body.empty() && std::isspace(static_cast<unsigned char>(body.front()))) body.remove_prefix(1);
  if (body.empty()) return "HTTP " + std::to_string(reply.status) + " without a reason";
  return std::string(body.substr(0, kMaxReason));
}

bool declined(const HttpReply& reply) {
  auto doc = OrderedJson::parse(reply.body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return false;
  auto it = doc.find("enrolled");
  return it != doc.end() && it->is_boolean() && !it->get<bool>();
}

Outcome success(const Request& r, level::level_enum lvl, std::string log) {
  Outcome out{0, {}, lvl, pod_fields(r) + " " + log};
  if (r.command == Command::kAdd) out.stdout_text = result_output(r.config);
  return out;
}

Outcome failure(const Request& r, std::string msg, std::string details) {
  CniError e{r.config.cni_version, ErrorCode::kInternal, std::move(msg), std::move(details)};
  return Outcome{1, e.to_json(), level::err,
                 pod_fields(r) + " result=failed msg=\"" + e.msg + "\" details=\"" + e.details + "\""};
}

std::string_view path_of(Command command) {
  switch (command) {
    case Command::kAdd:
      return "/cmdadd";
    case Command::kDel:
      return "/cmddel";
    default:
      return "/cmdcheck";
  }
}

}  // namespace

bool is_passthrough(const Request& request) {
  if (request.pod.name.empty()) return true;
  return std::ranges::find(request.config.exclude_namespaces, request.pod.ns) !=
         request.config.exclude_namespaces.end();
}

Plan plan(const Request& request) {
  if (is_passthrough(request)) {
    return success(request, level::info,
                   request.pod.name.empty() ? "result=passthrough reason=no_pod_name"
                                            : "result=passthrough reason=excluded_namespace");
  }
  auto body = build_event_json(request);
  if (!body) {
    if (request.command == Command::kDel) return error_outcome(Command::kDel, body.error());
    return Outcome{1, body.error().to_json(), level::err,
                   pod_fields(request) + " result=invalid msg=\"" + body.error().msg + "\""};
  }
  return AgentCall{request.config.agent_socket, std::string(path_of(request.command)), std::move(*body)};
}

Outcome conclude(const Request& r, const base::Result<HttpReply>& reply) {
  const std::string where = "agent " + r.config.agent_socket;
  switch (r.command) {
    case Command::kDel:
      if (!reply) return success(r, level::warn, "result=ok agent_error=\"" + reply.error().message() + "\"");
      if (reply->status / 100 != 2) {
        return success(r, level::warn,
                       "result=ok agent_status=" + std::to_string(reply->status) + " reason=\"" +
                           reason_of(*reply) + "\"");
      }
      return success(r, level::info, "result=ok");
    case Command::kCheck:
      if (!reply)
        return success(r, level::warn, "result=unverified agent_error=\"" + reply.error().message() + "\"");
      if (reply->status == 404) return success(r, level::info, "result=unverified agent_status=404");
      if (reply->status / 100 != 2) {
        return failure(r,
                       "node agent reports the pod's redirection or proxy missing (HTTP " +
                           std::to_string(reply->status) + ")",
                       reason_of(*reply));
      }
      return success(r, level::debug,
                     declined(*reply) ? "result=ok enrolled=false" : "result=ok enrolled=true");
    default:
      break;
  }
  if (!reply) return failure(r, "failed to contact the node agent", where + ": " + reply.error().message());
  if (reply->status / 100 != 2) {
    return failure(r, "node agent refused the pod (HTTP " + std::to_string(reply->status) + ")",
                   reason_of(*reply));
  }
  return success(r, level::info, declined(*reply) ? "result=ok enrolled=false" : "result=ok enrolled=true");
}

std::string result_output(const PluginConfig& config) {
  const auto& prev = config.prev_result;
  if (prev.is_object()) {
    auto it = prev.find("cniVersion");
    if (config.prev_result_text && it != prev.end() && it->is_string() &&
        it->get_ref<const std::string&>() == config.cni_version) {
      return *config.prev_result_text;
    }
  }
  OrderedJson out;
  out["cniVersion"] = config.cni_version;
  if (prev.is_object()) {
    for (const auto& [key, value] : prev.items()) {
      if (key != "cniVersion") out[key] = value;
    }
  }
  return out.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

Outcome error_outcome(Command command, const CniError& error) {
  if (command == Command::kDel) {
    return Outcome{0,
                   {},
                   level::warn,
                   "cmd=DEL result=ok ignored_error=\"" + error.msg + "\" details=\"" + error.details + "\""};
  }
  return Outcome{1, error.to_json(), level::err,
                 "cmd=" + std::string(verb(command)) + " result=invalid code=" +
                     std::to_string(static_cast<int>(error.code)) + " msg=\"" + error.msg + "\""};
}

}  // namespace meshnode::cni
