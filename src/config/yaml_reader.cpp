#include "config/yaml_reader.hpp"

#include <algorithm>
#include <charconv>
#include <set>

namespace meshnode::config::detail {
namespace {

using base::Errc;

std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Scalar:
      return "a scalar \"" + node.Scalar() + "\"";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

std::optional<std::uint64_t> parse_unsigned(const std::string& text, std::uint64_t max) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value > max) return std::nullopt;
  return value;
}

}  // namespace

At At::child(const YAML::Node& value, std::string_view key) const {
  return At{value, path.empty() ? std::string(key) : path + "." + std::string(key)};
}

At At::item(const YAML::Node& value, std::string_view index) const {
  return At{value, path + "[" + std::string(index) + "]"};
}

std::unexpected<base::Error> Reader::fail(const YAML::Mark& mark, std::string_view path,
                                          std::string_view what) const {
  // yaml-cpp marks are 0-based; a null mark (-1) only comes from nodes we synthesised.
  int line = mark.line < 0 ? 0 : mark.line + 1;
  int column = mark.column < 0 ? 0 : mark.column + 1;
  return base::fail(Errc::kConfig, source_ + ":" + std::to_string(line) + ":" + std::to_string(column) +
                                       ": " + (path.empty() ? std::string("(root)") : std::string(path)) +
                                       ": " + std::string(what));
}

Result<void> Reader::expect_map(const At& at) const {
  if (!at.node.IsMap()) return fail(at, "expected a map, got " + describe(at.node));
  return {};
}

Result<void> Reader::expect_sequence(const At& at) const {
  if (!at.node.IsSequence()) return fail(at, "expected a sequence, got " + describe(at.node));
  return {};
}

Result<void> Reader::keys(const At& at, std::initializer_list<std::string_view> allowed) const {
  MESHNODE_CONFIG_TRY(expect_map(at));
  std::set<std::string, std::less<>> seen;
  for (const auto& entry : at.node) {
    const YAML::Node& key = entry.first;
    if (!key.IsScalar()) return fail(key.Mark(), at.path, "expected a string key, got " + describe(key));
    const std::string& name = key.Scalar();
    if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
      return fail(key.Mark(), at.path, "unknown key \"" + name + "\"");
    }
    if (!seen.insert(name).second) return fail(key.Mark(), at.path, "duplicate key \"" + name + "\"");
  }
  return {};
}

Result<void> Reader::unsupported(const At& at, std::string_view key) const {
  for (const auto& entry : at.node) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) {
      return fail(entry.first.Mark(), at.path, "key \"" + std::string(key) + "\" is not supported yet");
    }
  }
  return {};
}

std::optional<At> Reader::field(const At& at, std::string_view key) const {
  // Iterate instead of operator[]: the const lookup of yaml-cpp 0.7 needs a std::string key and
  // we already know the keys are unique scalars (keys() ran first).
  for (const auto& entry : at.node) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) {
      if (entry.second.IsNull()) return std::nullopt;
      return at.child(entry.second, key);
    }
  }
  return std::nullopt;
}

Result<At> Reader::required(const At& at, std::string_view key) const {
  for (const auto& entry : at.node) {
    if (entry.first.IsScalar() && entry.first.Scalar() == key) return at.child(entry.second, key);
  }
  return fail(at, "missing required key \"" + std::string(key) + "\"");
}

Result<std::string> Reader::string(const At& at) const {
  if (!at.node.IsScalar()) return fail(at, "expected a string, got " + describe(at.node));
  return at.node.Scalar();
}

Result<void> Reader::required_into(const At& at, std::string_view key, std::string& out) const {
  auto value_at = required(at, key);
  if (!value_at) return std::unexpected(std::move(value_at.error()));
  auto value = string(*value_at);
  if (!value) return std::unexpected(std::move(value.error()));
  out = std::move(*value);
  return {};
}

Result<std::vector<std::string>> Reader::strings(const At& at) const {
  return list(at, [this](const At& item) { return string(item); });
}

Result<bool> Reader::boolean(const At& at) const {
  auto text = string(at);
  if (!text) return std::unexpected(std::move(text.error()));
  if (*text == "true") return true;
  if (*text == "false") return false;
  return fail(at, "invalid boolean \"" + *text + "\": expected true or false");
}

Result<std::uint32_t> Reader::u32(const At& at) const {
  auto text = string(at);
  if (!text) return std::unexpected(std::move(text.error()));
  auto value = parse_unsigned(*text, UINT32_MAX);
  if (!value) return fail(at, "invalid number \"" + *text + "\": expected an integer in 0..4294967295");
  return static_cast<std::uint32_t>(*value);
}

Result<std::uint16_t> Reader::port(const At& at, bool allow_zero) const {
  auto text = string(at);
  if (!text) return std::unexpected(std::move(text.error()));
  auto value = parse_unsigned(*text, UINT16_MAX);
  if (!value || (*value == 0 && !allow_zero)) {
    return fail(
        at, "invalid port \"" + *text + "\": expected an integer in " + (allow_zero ? "0" : "1") + "..65535");
  }
  return static_cast<std::uint16_t>(*value);
}

Result<base::IpAddr> Reader::ip(const At& at) const {
  auto text = string(at);
  if (!text) return std::unexpected(std::move(text.error()));
  auto parsed = base::IpAddr::parse(*text);
  if (!parsed) return fail(at, "invalid IP address \"" + *text + "\"");
  return *parsed;
}

Result<base::IpNet> Reader::cidr(const At& at) const {
  auto text = string(at);
  if (!text) return std::unexpected(std::move(text.error()));
  auto parsed = base::IpNet::parse(*text);
  if (!parsed) return fail(at, "invalid CIDR \"" + *text + "\"");
  return *parsed;
}

Result<std::vector<state::PortMapping>> Reader::port_map(const At& at, bool allow_zero_target) const {
  MESHNODE_CONFIG_TRY(expect_map(at));
  std::vector<state::PortMapping> out;
  for (const auto& entry : at.node) {
    auto service_port = port(At{entry.first, at.path});
    if (!service_port) return std::unexpected(std::move(service_port.error()));
    for (const auto& seen : out) {
      if (seen.service_port == *service_port) {
        return fail(entry.first.Mark(), at.path, "duplicate port \"" + entry.first.Scalar() + "\"");
      }
    }
    auto target = port(at.item(entry.second, std::to_string(*service_port)), allow_zero_target);
    if (!target) return std::unexpected(std::move(target.error()));
    out.push_back(state::PortMapping{*service_port, *target});
  }
  return out;
}

}  // namespace meshnode::config::detail
