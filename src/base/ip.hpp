#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.hpp"

namespace meshnode::base {

/// An IPv4 or IPv6 address as a value (no Asio, no sockets: usable from pure state code).
/// IPv4 is stored in the first 4 bytes of `bytes`; IPv4-mapped IPv6 (::ffff:a.b.c.d) is
/// normalised to IPv4 by every constructor, so a dual-stack socket's peer compares equal to
/// the workload's IPv4 address.
class IpAddr {
 public:
  enum class Family : std::uint8_t { kV4, kV6 };

  IpAddr() = default;
  /// From 4 bytes (network order).
  static IpAddr v4(const std::array<std::uint8_t, 4>& b);
  /// From 16 bytes (network order); IPv4-mapped addresses become IPv4.
  static IpAddr v6(const std::array<std::uint8_t, 16>& b);
  /// From raw bytes of length 4 or 16 (xDS `bytes address`); nullopt for other lengths.
  static std::optional<IpAddr> from_bytes(std::string_view raw);
  /// Parses "a.b.c.d" or an IPv6 literal without brackets. Errc::kInvalidArgument otherwise.
  [[nodiscard]] static Result<IpAddr> parse(std::string_view text);

  [[nodiscard]] Family family() const noexcept { return family_; }
  [[nodiscard]] bool is_v4() const noexcept { return family_ == Family::kV4; }
  [[nodiscard]] bool is_loopback() const noexcept;
  [[nodiscard]] bool is_unspecified() const noexcept;
  /// 4 or 16 bytes in network order.
  [[nodiscard]] std::string_view bytes() const noexcept;
  /// "a.b.c.d" or RFC 5952 IPv6 text (no brackets).
  [[nodiscard]] std::string to_string() const;

  friend auto operator<=>(const IpAddr&, const IpAddr&) = default;
  friend bool operator==(const IpAddr&, const IpAddr&) = default;

 private:
  Family family_ = Family::kV4;
  std::array<std::uint8_t, 16> bytes_{};
};

/// An address with a port. Text form "a.b.c.d:port" / "[v6]:port" (CONNECT authority form).
struct SocketAddr {
  IpAddr ip;
  std::uint16_t port = 0;

  /// Parses "a.b.c.d:port" or "[v6]:port"; port 1..65535. Errc::kInvalidArgument naming the text.
  [[nodiscard]] static Result<SocketAddr> parse(std::string_view text);
  [[nodiscard]] std::string to_string() const;

  friend auto operator<=>(const SocketAddr&, const SocketAddr&) = default;
  friend bool operator==(const SocketAddr&, const SocketAddr&) = default;
};

/// A CIDR block, e.g. 10.0.0.0/8. Host bits are kept as given; `contains` masks them.
struct IpNet {
  IpAddr addr;
  std::uint8_t prefix_len = 0;

  /// Parses "ip/len" or a bare ip (full length). Errc::kInvalidArgument on bad text or length.
  [[nodiscard]] static Result<IpNet> parse(std::string_view text);
  [[nodiscard]] bool contains(const IpAddr& ip) const noexcept;
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(const IpNet&, const IpNet&) = default;
};

}  // namespace meshnode::base

template <>
struct std::hash<meshnode::base::IpAddr> {
  std::size_t operator()(const meshnode::base::IpAddr& ip) const noexcept {
    return std::hash<std::string_view>{}(ip.bytes());
  }
};
template <>
struct std::hash<meshnode::base::SocketAddr> {
  std::size_t operator()(const meshnode::base::SocketAddr& a) const noexcept {
    return std::hash<meshnode::base::IpAddr>{}(a.ip) * 31 + a.port;
  }
};
