#include "config/local_config.hpp"

#include <cerrno>
#include <fstream>
#include <sstream>

#include "config/schema.hpp"

namespace meshnode::config {
namespace {

using base::Errc;
using detail::At;
using detail::Reader;

Result<LocalConfig> parse_root(const Reader& r, const YAML::Node& root) {
  LocalConfig config;
  if (root.IsNull()) return config;
  At at{root, ""};
  MESHNODE_CONFIG_TRY(r.keys(at, {"workloads", "services", "policies"}));
  MESHNODE_CONFIG_TRY(r.read_into(at, "workloads", config.workloads, [](const Reader& rd, const At& a) {
    return rd.list(a, [&rd](const At& item) { return detail::parse_workload(rd, item); });
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "services", config.services, [](const Reader& rd, const At& a) {
    return rd.list(a, [&rd](const At& item) { return detail::parse_service(rd, item); });
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "policies", config.policies, [](const Reader& rd, const At& a) {
    return rd.list(a, [&rd](const At& item) { return detail::parse_policy(rd, item); });
  }));
  return config;
}

}  // namespace

Result<LocalConfig> parse_local_config(std::string_view yaml_text, std::string_view source_name) {
  Reader reader{std::string(source_name)};
  try {
    std::vector<YAML::Node> documents = YAML::LoadAll(std::string(yaml_text));
    if (documents.empty()) return LocalConfig{};
    if (documents.size() > 1) {
      return reader.fail(documents[1].Mark(), "",
                         "expected one YAML document, got " + std::to_string(documents.size()));
    }
    return parse_root(reader, documents[0]);
  } catch (const YAML::Exception& e) {
    // Parser errors carry a position; e.msg is yaml-cpp's text without it.
    return reader.fail(e.mark, "", "malformed YAML: " + e.msg);
  } catch (const std::exception& e) {
    return base::fail(Errc::kInternal,
                      std::string(source_name) + ": unexpected error while parsing: " + e.what());
  }
}

Result<LocalConfig> load_local_config(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::fail_errno("cannot open local config " + path.string(), errno);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return base::fail_errno("cannot read local config " + path.string(), errno);
  return parse_local_config(text.str(), path.string());
}

}  // namespace meshnode::config
