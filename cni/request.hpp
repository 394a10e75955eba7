#pragma once

#include <expected>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cni/spec.hpp"

namespace meshnode::cni {

/// The verb a runtime asks for (CNI spec 1.0 §Parameters, `CNI_COMMAND`). GC and STATUS (spec 1.1)
/// are not supported: we do not advertise 1.1, so runtimes never send them.
enum class Command { kAdd, kDel, kCheck, kVersion };

/// Default agent socket (Istio's chart path, DESIGN §1).
inline constexpr std::string_view kDefaultAgentSocket = "/var/run/istio-cni/pluginevent.sock";

/// Namespace used when CNI_ARGS has no K8S_POD_NAMESPACE (podman and other non-Kubernetes runtimes,
/// research env-probe §6). "default" is where Kubernetes puts a pod without a namespace, so the
/// agent's enrollment policy sees such pods exactly as it would see a namespace-less kubectl pod.
/// Overridable per network with the `defaultPodNamespace` option.
inline constexpr std::string_view kDefaultPodNamespace = "default";

/// The process environment as name → value (only the CNI_* entries matter).
using Env = std::map<std::string, std::string, std::less<>>;

/// Builds an `Env` from a NULL-terminated `environ`-style array ("NAME=value" entries).
[[nodiscard]] Env env_from(char** envp);

/// Network configuration from stdin (CNI spec 1.0 §Network configuration) plus our options.
struct PluginConfig {
  std::string cni_version;                        ///< `cniVersion`, one of kSupportedVersions
  std::string name;                               ///< `name` (network name)
  std::string type;                               ///< `type` (our executable's name)
  std::string agent_socket{kDefaultAgentSocket};  ///< `agentSocket`: Unix socket of the node agent
  std::vector<std::string> exclude_namespaces;    ///< `excludeNamespaces`: never sent to the agent
  std::string log_level = "warn";                 ///< `logLevel`: debug|info|warn|error|off (stderr)
  std::string default_pod_namespace{kDefaultPodNamespace};  ///< `defaultPodNamespace`
  /// `prevResult` exactly as it appeared on stdin (byte span of the value), when present. Printed
  /// verbatim on success so a chained result passes through byte for byte (CNI spec 1.0 §Chained).
  std::optional<std::string> prev_result_text;
  nlohmann::ordered_json prev_result;  ///< parsed prevResult (null when absent), key order kept
};

/// Pod identity from CNI_ARGS (Kubernetes conventions: `K8S_POD_NAME`, `K8S_POD_NAMESPACE`,
/// `K8S_POD_UID`). Empty name: not a pod we can identify.
struct PodArgs {
  std::string name;
  std::string ns;  ///< K8S_POD_NAMESPACE, or the config's defaultPodNamespace when absent
  std::string uid;
};

/// One plugin invocation, validated: everything the decision code needs, nothing read later.
struct Request {
  Command command = Command::kAdd;
  std::string container_id;  ///< CNI_CONTAINERID
  std::string netns;         ///< CNI_NETNS (may be empty on DEL)
  std::string ifname;        ///< CNI_IFNAME
  PodArgs pod;
  PluginConfig config;
};

/// Reads `CNI_COMMAND`. Code 4 (msg names CNI_COMMAND) when missing or not ADD|DEL|CHECK|VERSION.
[[nodiscard]] std::expected<Command, CniError> parse_command(const Env& env);

/// Splits CNI_ARGS ("K=V;K=V", CNI spec 1.0 §Parameters) into pairs. Empty segments are skipped;
/// a segment without '=' or with an empty key is code 4 naming CNI_ARGS.
[[nodiscard]] std::expected<std::map<std::string, std::string, std::less<>>, CniError> parse_cni_args(
    std::string_view args);

/// Parses stdin into a PluginConfig. Code 6 when `stdin_text` is not one JSON object (details =
/// parser message); code 1 when cniVersion is unsupported; code 7 when a field has the wrong type
/// or value (msg names the field). Errors carry the config's cniVersion once it is known.
[[nodiscard]] std::expected<PluginConfig, CniError> parse_config(std::string_view stdin_text);

/// Validates env + stdin for `command` (not kVersion) into a Request. Env is checked before stdin
/// (so a runtime that sets nothing gets code 4). Rules (CNI spec 1.0 §Parameters): CNI_CONTAINERID
/// non-empty, starts alphanumeric, then [A-Za-z0-9_.-]; CNI_IFNAME non-empty, not "."/"..", < 16
/// bytes, no '/', ':' or whitespace; CNI_NETNS required for ADD and CHECK. CHECK with a config
/// older than 0.4.0 is code 1 (the verb does not exist there).
/// Pure: reads only its arguments.
[[nodiscard]] std::expected<Request, CniError> parse_request(Command command, const Env& env,
                                                             std::string_view stdin_text);

}  // namespace meshnode::cni
