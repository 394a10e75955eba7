#pragma once

#include <spdlog/common.h>

#include <chrono>
#include <string>
#include <variant>

#include "base/error.hpp"
#include "cni/http.hpp"
#include "cni/request.hpp"
#include "cni/spec.hpp"

namespace meshnode::cni {

/// Deadline for the whole agent exchange (connect + request + response), as the reference plugin.
inline constexpr std::chrono::seconds kAgentTimeout{5};

/// What the process does at the end: exit status, exact stdout, one stderr log line.
struct Outcome {
  int exit_code = 0;
  std::string stdout_text;  ///< result or error object (CNI spec 1.0 §Result, §Error); may be empty
  spdlog::level::level_enum log_level = spdlog::level::debug;
  std::string log;  ///< `key=value` line for stderr; empty: nothing to log
};

/// A request to send to the node agent: HTTP POST of `body` to `path` on `socket`.
struct AgentCall {
  std::string socket;
  std::string path;  ///< "/cmdadd", "/cmddel" or "/cmdcheck"
  std::string body;  ///< build_event_json
};

/// Either the final outcome (no agent needed) or the call to make first.
using Plan = std::variant<Outcome, AgentCall>;

/// True when the pod must not be sent to the agent: CNI_ARGS names no pod (not a Kubernetes or
/// podman pod we could enroll), or its namespace is in `excludeNamespaces`. Such pods get prevResult
/// back untouched (DESIGN §1: the plugin must never break pods that are not enrolled). Pure.
[[nodiscard]] bool is_passthrough(const Request& request);

/// Decides what an ADD/DEL/CHECK request needs. Passthrough pods finish at once (ADD prints the
/// result, DEL and CHECK print nothing); otherwise the agent is asked. An event that cannot be
/// built (malformed prevResult.ips) fails ADD/CHECK with code 7; DEL still succeeds. Pure.
[[nodiscard]] Plan plan(const Request& request);

/// Maps the agent's answer to the outcome. Contract with the agent (DESIGN §1, issue 4):
/// - ADD: 2xx → success, prevResult printed. The body may be `{"enrolled":false}`: the agent
///   declined the pod (not selected by its policy); that is also success with prevResult
///   untouched, only the log line differs. Any other 2xx body means enrolled. Non-2xx, or no answer
///   within kAgentTimeout → code 999, `details` = the agent's reason (response body) or the
///   transport error, so the runtime retries the sandbox instead of starting it unenrolled.
/// - DEL: always exit 0 with no output (CNI spec 1.0 §DEL must be idempotent and tolerate
///   missing resources); failures are only logged.
/// - CHECK: 2xx (incl. `{"enrolled":false}`) → success; 404 (agent without CHECK) → success;
///   other statuses mean the agent reports the pod's rules or proxy missing → code 999 with the
///   reason. An unreachable agent passes with a warning: the agent is not on the data path, and a
///   failed CHECK makes runtimes tear the pod down (§CHECK), so an agent restart must not do that.
/// Pure.
[[nodiscard]] Outcome conclude(const Request& request, const base::Result<HttpReply>& reply);

/// The ADD success output: prevResult with the config's cniVersion (CNI spec 1.0 §Chained
/// plugins: a plugin that changes nothing returns prevResult). When prevResult's text is known
/// and already carries that cniVersion, it is returned byte for byte; otherwise it is re-encoded
/// with `cniVersion` first and the other keys in their original order. No prevResult (we are first
/// in the chain, a misconfiguration) → `{"cniVersion":"<v>"}`. Pure.
[[nodiscard]] std::string result_output(const PluginConfig& config);

/// The outcome for a request that could not be parsed: the error object and exit 1, except DEL,
/// which logs and exits 0 (see conclude). Pure.
[[nodiscard]] Outcome error_outcome(Command command, const CniError& error);

}  // namespace meshnode::cni
