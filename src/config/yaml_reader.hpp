#pragma once

// Internal to meshnode::config: typed, position-aware reading of yaml-cpp nodes. Every failure
// becomes Errc::kConfig "<source>:<line>:<column>: <key path>: <what>", 1-based positions.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "base/ip.hpp"
#include "state/workload.hpp"

/// Returns the error of a failed Result-returning expression from the enclosing function.
#define MESHNODE_CONFIG_TRY(expr)                                      \
  do {                                                                 \
    if (auto meshnode_try_result_ = (expr); !meshnode_try_result_) {   \
      return std::unexpected(std::move(meshnode_try_result_.error())); \
    }                                                                  \
  } while (0)

namespace meshnode::config::detail {

using base::Result;

/// A YAML node and the key path that led to it, e.g. "workloads[1].workloadIps[0]" ("" = root).
struct At {
  YAML::Node node;
  std::string path;

  /// The path of map value `key` below this node.
  [[nodiscard]] At child(const YAML::Node& value, std::string_view key) const;
  /// The path of sequence item `index` (or of a map key written in brackets) below this node.
  [[nodiscard]] At item(const YAML::Node& value, std::string_view index) const;
};

/// Reads typed values out of one document; knows the source name for error messages. Stateless
/// otherwise; safe to share between threads.
class Reader {
 public:
  explicit Reader(std::string source_name) : source_(std::move(source_name)) {}

  /// "<source>:<line>:<column>: <path or (root)>: <what>" as Errc::kConfig.
  [[nodiscard]] std::unexpected<base::Error> fail(const YAML::Mark& mark, std::string_view path,
                                                  std::string_view what) const;
  [[nodiscard]] std::unexpected<base::Error> fail(const At& at, std::string_view what) const {
    return fail(at.node.Mark(), at.path, what);
  }

  [[nodiscard]] Result<void> expect_map(const At& at) const;
  [[nodiscard]] Result<void> expect_sequence(const At& at) const;
  /// Requires a map whose keys are all in `allowed`, each at most once.
  [[nodiscard]] Result<void> keys(const At& at, std::initializer_list<std::string_view> allowed) const;
  /// Fails (at the key) when `key` is present: for schema keys we recognise but do not implement.
  [[nodiscard]] Result<void> unsupported(const At& at, std::string_view key) const;
  /// The value of `key`; nullopt when the key is absent or its value is null.
  [[nodiscard]] std::optional<At> field(const At& at, std::string_view key) const;
  /// The value of `key`; fails naming the key when it is absent.
  [[nodiscard]] Result<At> required(const At& at, std::string_view key) const;

  [[nodiscard]] Result<std::string> string(const At& at) const;
  /// Stores the string value of `key` in `out`; fails when it is absent or not a scalar.
  [[nodiscard]] Result<void> required_into(const At& at, std::string_view key, std::string& out) const;
  [[nodiscard]] Result<std::vector<std::string>> strings(const At& at) const;
  [[nodiscard]] Result<bool> boolean(const At& at) const;
  [[nodiscard]] Result<std::uint32_t> u32(const At& at) const;
  /// 1..65535 (0..65535 when `allow_zero`).
  [[nodiscard]] Result<std::uint16_t> port(const At& at, bool allow_zero = false) const;
  [[nodiscard]] Result<base::IpAddr> ip(const At& at) const;
  [[nodiscard]] Result<base::IpNet> cidr(const At& at) const;
  /// A map {servicePort: targetPort}; target 0 allowed only when `allow_zero_target`.
  [[nodiscard]] Result<std::vector<state::PortMapping>> port_map(const At& at, bool allow_zero_target) const;

  /// One of the spellings in `choices` (exact, case-sensitive), else an error listing them.
  template <class E>
  [[nodiscard]] Result<E> choice(const At& at,
                                 std::initializer_list<std::pair<std::string_view, E>> choices) const {
    auto text = string(at);
    if (!text) return std::unexpected(std::move(text.error()));
    std::string expected;
    for (const auto& [name, value] : choices) {
      if (*text == name) return value;
      expected += (expected.empty() ? "" : ", ") + std::string(name);
    }
    return fail(at, "invalid value \"" + *text + "\": expected one of " + expected);
  }

  /// Parses each item of a sequence with `each(const At&) -> Result<T>`.
  template <class F>
  [[nodiscard]] auto list(const At& at, F&& each) const
      -> Result<std::vector<typename std::invoke_result_t<F&, const At&>::value_type>> {
    std::vector<typename std::invoke_result_t<F&, const At&>::value_type> out;
    MESHNODE_CONFIG_TRY(expect_sequence(at));
    std::size_t index = 0;
    for (const auto& node : at.node) {
      auto value = each(at.item(node, std::to_string(index++)));
      if (!value) return std::unexpected(std::move(value.error()));
      out.push_back(std::move(*value));
    }
    return out;
  }

  /// If `key` is set (not null), parses it with `parse(const Reader&, const At&)` (or a Reader
  /// member function) into `out`; otherwise leaves `out` alone.
  template <class T, class F>
  [[nodiscard]] Result<void> read_into(const At& at, std::string_view key, T& out, F&& parse) const {
    auto value_at = field(at, key);
    if (!value_at) return {};
    auto value = std::invoke(parse, *this, *value_at);
    if (!value) return std::unexpected(std::move(value.error()));
    out = std::move(*value);
    return {};
  }

 private:
  std::string source_;
};

}  // namespace meshnode::config::detail
