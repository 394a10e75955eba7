#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace meshnode::agent {

/// Type (= executable name in the runtime's CNI bin dir) of our entry in a CNI chain.
inline constexpr std::string_view kCniPluginType = "meshnode-cni";

/// Our entry in the primary CNI's plugin list: the keys meshnode-cni reads (cni/request.hpp
/// PluginConfig). Rendered as `{"type":"meshnode-cni","agentSocket":…,"excludeNamespaces":[…],
/// "logLevel":…}`.
struct ChainEntry {
  std::string agent_socket;                     ///< `agentSocket`: the plugin-event socket as the host sees it
  std::vector<std::string> exclude_namespaces;  ///< `excludeNamespaces`: pods the plugin never sends to us
  std::string log_level = "warn";               ///< `logLevel` of the plugin (its stderr goes to the runtime's log)
};

/// What `plan_chain` decided for one config file of the conf dir.
struct ChainPlan {
  std::string file;            ///< name to write: the source's, or `<stem>.conflist` for a single-plugin config
  std::string text;            ///< its new content (JSON, 2-space indent, trailing newline)
  bool changed = false;        ///< false: the source already ends with exactly our entry; write nothing
  bool remove_source = false;  ///< true: a single-plugin `.conf`/`.json` is converted; delete it after `file` is in place
  std::vector<std::string> removed;  ///< types of the entries taken out (a stale meshnode-cni, replaced plugins)
};

/// The config files of a CNI conf dir in the order container runtimes consider them (libcni
/// `ConfFiles` + sort, as containerd and CRI-O use it): names ending in `.conf`, `.conflist` or
/// `.json` that do not start with '.' (our temp files do), in byte order. The first one is the
/// network the runtime uses. Pure.
[[nodiscard]] std::vector<std::string> cni_config_files(std::vector<std::string> names);

/// The primary CNI's config `text` (file name `file`) with our entry at the end of its chain (CNI
/// spec 1.0 §Network configuration lists). Every entry whose type is meshnode-cni or one of
/// `replace_types` is removed, then exactly one `entry` is appended as the last plugin. A
/// single-plugin config (an object without "plugins": a `.conf`, or a `.json`) becomes the list
/// `{"cniVersion", "name", "plugins": [<the whole config>]}` named `<stem>.conflist` (libcni's
/// ConfListFromConf). Every other key, and key order, is kept.
/// `plugin_versions` are the cniVersions the installed meshnode-cni reports (its VERSION output);
/// when non-empty, a config whose cniVersion is not among them is refused: the runtime would call
/// the plugin with a version it rejects and no pod on the node could start.
/// @returns Errc::kConfig naming `file` when text is not one JSON object, "plugins" is not a list
///          of objects with a string "type", no other plugin is left to chain after, or the
///          cniVersion is missing or unsupported. Pure.
[[nodiscard]] base::Result<ChainPlan> plan_chain(std::string_view file, std::string_view text, const ChainEntry& entry,
                                                 const std::vector<std::string>& replace_types,
                                                 const std::vector<std::string>& plugin_versions);

/// What removing our entries from one config file gives.
struct ChainRemoval {
  bool changed = false;  ///< false: the file has no entry of the given types (or is not a config list)
  bool empty = false;    ///< true: nothing but such entries was in the list; the file should go
  std::string text;      ///< the new content when changed and not empty
};

/// `text` without any plugin entry whose type is in `types` (uninstall). Text that is not a config
/// list is reported unchanged: we only ever wrote lists. Pure.
[[nodiscard]] ChainRemoval remove_chain_entries(std::string_view text, const std::vector<std::string>& types);

/// The cniVersions in a plugin's VERSION output (CNI spec 1.0 §VERSION:
/// `{"cniVersion":"1.0.0","supportedVersions":[…]}`).
/// @returns Errc::kProtocol when the output is not such an object. Pure.
[[nodiscard]] base::Result<std::vector<std::string>> parse_version_output(std::string_view text);

}  // namespace meshnode::agent
