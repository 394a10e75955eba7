#include "cni/spec.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace meshnode::cni {

namespace {
using OrderedJson = nlohmann::ordered_json;

std::string dump(const OrderedJson& j) {
  return j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}
}  // namespace

std::string CniError::to_json() const {
  OrderedJson j;
  j["cniVersion"] = cni_version;
  j["code"] = static_cast<int>(code);
  j["msg"] = msg;
  if (!details.empty()) j["details"] = details;
  return dump(j);
}

std::string version_json() {
  OrderedJson j;
  j["cniVersion"] = kPreferredVersion;
  j["supportedVersions"] = OrderedJson::array();
  for (auto v : kSupportedVersions) j["supportedVersions"].push_back(v);
  return dump(j);
}

bool is_supported_version(std::string_view version) noexcept {
  return std::ranges::find(kSupportedVersions, version) != std::end(kSupportedVersions);
}

bool supports_check(std::string_view version) noexcept { return version == "0.4.0" || version == "1.0.0"; }

}  // namespace meshnode::cni
