// The decision half of the CNI installer: which file is the primary config and what it must look
// like with our entry chained at its end. Pure JSON work; cni_install.cpp does the file I/O.
#include "agent/cni_chain.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;
using Json = nlohmann::ordered_json;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool contains(const std::vector<std::string>& list, std::string_view value) {
  return std::ranges::find(list, value) != list.end();
}

Json entry_json(const ChainEntry& entry) {
  Json j;
  j["type"] = kCniPluginType;
  j["agentSocket"] = entry.agent_socket;
  j["excludeNamespaces"] = entry.exclude_namespaces;
  j["logLevel"] = entry.log_level;
  return j;
}

std::string render(const Json& doc) { return doc.dump(2) + "\n"; }

// Parses a config file; a list or a single-plugin config, each with a string cniVersion.
base::Result<Json> parse_config(std::string_view file, std::string_view text) {
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return fail(Errc::kConfig, std::string(file) + ": not a JSON object");
  if (doc.contains("plugins")) {
    const Json& plugins = doc["plugins"];
    if (!plugins.is_array()) return fail(Errc::kConfig, std::string(file) + ": \"plugins\" is not a list");
    for (std::size_t i = 0; i < plugins.size(); ++i) {
      if (!plugins[i].is_object() || !plugins[i].contains("type") || !plugins[i]["type"].is_string()) {
        return fail(Errc::kConfig, std::string(file) + ": plugins[" + std::to_string(i) + "] has no string \"type\"");
      }
    }
  } else if (!doc.contains("type") || !doc["type"].is_string()) {
    return fail(Errc::kConfig, std::string(file) + ": neither a plugin list nor a plugin config (no \"type\")");
  }
  if (!doc.contains("cniVersion") || !doc["cniVersion"].is_string()) {
    return fail(Errc::kConfig, std::string(file) + ": no string \"cniVersion\"");
  }
  return doc;
}

std::string stem_of(std::string_view file) {
  const auto dot = file.rfind('.');
  return std::string(dot == std::string_view::npos ? file : file.substr(0, dot));
}

}  // namespace

std::vector<std::string> cni_config_files(std::vector<std::string> names) {
  std::erase_if(names, [](const std::string& n) {
    return n.empty() || n.front() == '.' || !(ends_with(n, ".conf") || ends_with(n, ".conflist") || ends_with(n, ".json"));
  });
  std::ranges::sort(names);
  return names;
}

base::Result<ChainPlan> plan_chain(std::string_view file, std::string_view text, const ChainEntry& entry,
                                   const std::vector<std::string>& replace_types,
                                   const std::vector<std::string>& plugin_versions) {
  auto parsed = parse_config(file, text);
  if (!parsed) return std::unexpected(parsed.error());
  Json& doc = *parsed;
  const std::string version = doc["cniVersion"].get<std::string>();
  if (!plugin_versions.empty() && !contains(plugin_versions, version)) {
    std::string supported;
    for (const auto& v : plugin_versions) supported += (supported.empty() ? "" : ", ") + v;
    return fail(Errc::kConfig, std::string(file) + ": cniVersion " + version + " is not supported by " +
                                   std::string(kCniPluginType) + " (" + supported + "); not chaining into it");
  }
  ChainPlan plan;
  plan.file = std::string(file);
  Json list;
  if (doc.contains("plugins")) {
    list = std::move(doc);
  } else {
    // libcni ConfListFromConf: the whole single-plugin config becomes the first list entry.
    list["cniVersion"] = version;
    if (doc.contains("name")) list["name"] = doc["name"];
    list["plugins"] = Json::array({std::move(doc)});
    plan.file = stem_of(file) + ".conflist";
    plan.remove_source = true;
  }
  const Json ours = entry_json(entry);
  const Json before = list["plugins"];
  Json kept = Json::array();
  for (const Json& plugin : before) {
    const std::string type = plugin["type"].get<std::string>();
    if (type == kCniPluginType || contains(replace_types, type)) {
      plan.removed.push_back(type);
    } else {
      kept.push_back(plugin);
    }
  }
  if (kept.empty()) {
    return fail(Errc::kConfig, std::string(file) + ": no plugin left to chain after (the list holds only our entry)");
  }
  kept.push_back(ours);
  list["plugins"] = std::move(kept);
  // Already right: exactly one entry of ours, last, identical; nothing else removed.
  const bool same = !plan.remove_source && plan.removed.size() == 1 && plan.removed[0] == kCniPluginType &&
                    !before.empty() && before.back() == ours;
  plan.changed = !same;
  if (same) plan.removed.clear();
  plan.text = render(list);
  return plan;
}

ChainRemoval remove_chain_entries(std::string_view text, const std::vector<std::string>& types) {
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  ChainRemoval removal;
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("plugins") || !doc["plugins"].is_array()) return removal;
  Json kept = Json::array();
  for (const Json& plugin : doc["plugins"]) {
    const bool ours = plugin.is_object() && plugin.contains("type") && plugin["type"].is_string() &&
                      contains(types, plugin["type"].get<std::string>());
    if (ours) {
      removal.changed = true;
    } else {
      kept.push_back(plugin);
    }
  }
  if (!removal.changed) return removal;
  removal.empty = kept.empty();
  doc["plugins"] = std::move(kept);
  if (!removal.empty) removal.text = render(doc);
  return removal;
}

base::Result<std::vector<std::string>> parse_version_output(std::string_view text) {
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("supportedVersions") ||
      !doc["supportedVersions"].is_array()) {
    return fail(Errc::kProtocol, "VERSION output is not {\"supportedVersions\":[...]}: " + std::string(text.substr(0, 200)));
  }
  std::vector<std::string> versions;
  for (const Json& v : doc["supportedVersions"]) {
    if (!v.is_string()) return fail(Errc::kProtocol, "VERSION output: supportedVersions holds a non-string");
    versions.push_back(v.get<std::string>());
  }
  return versions;
}

}  // namespace meshnode::agent
