#include "net/socket.hpp"

#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string>

namespace meshnode::net {
namespace {

// From <linux/netfilter_ipv4.h> and <linux/netfilter_ipv6/ip6_tables.h>, which clash with glibc's
// <netinet/in.h> when both are included.
constexpr int kSoOriginalDst = 80;
constexpr int kIp6tSoOriginalDst = 80;
constexpr int kOne = 1;

using base::Result;
using base::SocketAddr;
using base::UniqueFd;

std::string where_of(const base::Netns* netns) { return netns ? " in netns " + netns->description() : ""; }

// Runs `make` in `netns` when given; socket() binds the socket to the namespace current at creation.
template <class Fn>
Result<UniqueFd> create_in(const base::Netns* netns, Fn&& make) {
  Result<UniqueFd> out = base::fail(base::Errc::kInternal, "socket not created");
  if (netns == nullptr) return make();
  auto switched = netns->run_in([&] { out = make(); });
  if (!switched) return std::unexpected(switched.error());
  return out;
}

// setsockopt of an int option; Errc::kIo naming `what` and where.
Result<void> set_int(int fd, int level, int name, int value, std::string_view what, const std::string& where) {
  if (::setsockopt(fd, level, name, &value, sizeof(value)) == 0) return {};
  return base::fail_errno(std::string(what) + " on " + where, errno);
}

// Turns on net.ipv4.tcp_migrate_req in the calling thread's netns (Linux >= 5.14; /proc/sys/net is
// the netns of the thread that opens it). Without it, a listener that closes while another socket of
// its SO_REUSEPORT group stays open resets the connections still in its accept queue: during a proxy
// hand-over (rollout, restart) the old proxy's drain would reset a client that connected a moment
// before. With it, those requests move to the surviving listener. Best effort: an older kernel, or
// no permission, keeps today's behaviour.
void enable_request_migration() {
  constexpr const char* kPath = "/proc/sys/net/ipv4/tcp_migrate_req";
  const int fd = ::open(kPath, O_RDWR | O_CLOEXEC);
  if (fd < 0) return;
  char current = '0';
  if (::read(fd, &current, 1) != 1 || current != '1') {
    // Ignored on failure: migration is an improvement of the hand-over, not a condition of serving.
    (void)::pwrite(fd, "1", 1, 0);
  }
  ::close(fd);
}

}  // namespace

socklen_t to_sockaddr(const SocketAddr& addr, sockaddr_storage& out) {
  std::memset(&out, 0, sizeof(out));
  if (addr.ip.is_v4()) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&out);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(addr.port);
    std::memcpy(&sin->sin_addr, addr.ip.bytes().data(), 4);
    return sizeof(sockaddr_in);
  }
  auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out);
  sin6->sin6_family = AF_INET6;
  sin6->sin6_port = htons(addr.port);
  std::memcpy(&sin6->sin6_addr, addr.ip.bytes().data(), 16);
  return sizeof(sockaddr_in6);
}

Result<SocketAddr> from_sockaddr(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
    std::array<std::uint8_t, 4> b{};
    std::memcpy(b.data(), &sin->sin_addr, 4);
    return SocketAddr{base::IpAddr::v4(b), ntohs(sin->sin_port)};
  }
  if (ss.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    std::array<std::uint8_t, 16> b{};
    std::memcpy(b.data(), &sin6->sin6_addr, 16);
    return SocketAddr{base::IpAddr::v6(b), ntohs(sin6->sin6_port)};
  }
  return base::fail(base::Errc::kInvalidArgument, "unsupported address family " + std::to_string(ss.ss_family));
}

Result<UniqueFd> make_listener(const base::Netns* netns, const SocketAddr& addr, const ListenOptions& options) {
  auto make = [&]() -> Result<UniqueFd> {
    SocketAddr bind_addr = addr;
    bool dual_stack = addr.ip.is_v4() && addr.ip.is_unspecified();
    UniqueFd fd;
    const std::string where = "listener " + addr.to_string() + where_of(netns);
    if (dual_stack) {
      fd.reset(::socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      // A socket left v6-only would silently refuse IPv4 clients: then use a v4 socket instead.
      if (fd && set_int(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, 0, "IPV6_V6ONLY=0", where)) {
        bind_addr.ip = base::IpAddr::v6({});
      } else {
        fd.reset();
      }
    }
    if (!fd) {
      bind_addr = addr;
      fd.reset(::socket(addr.ip.is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    }
    if (!fd) return base::fail_errno("socket for " + where, errno);
    if (auto ok = set_int(fd.get(), SOL_SOCKET, SO_REUSEADDR, 1, "SO_REUSEADDR", where); !ok) return std::unexpected(ok.error());
    if (options.reuse_port) {
      // One socket per worker, and the hand-over to a restarted proxy, need it: fail without it.
      if (auto ok = set_int(fd.get(), SOL_SOCKET, SO_REUSEPORT, 1, "SO_REUSEPORT", where); !ok) return std::unexpected(ok.error());
      enable_request_migration();
    }
    if (options.transparent) {
      // Ignored when not permitted (EPERM without CAP_NET_ADMIN): the listener still serves
      // REDIRECT capture, which is what the agent programs; TPROXY capture alone needs it.
      auto ok = set_int(fd.get(), SOL_IP, IP_TRANSPARENT, 1, "IP_TRANSPARENT", where);
      if (!ok && ok.error().cause != std::errc::operation_not_permitted) return std::unexpected(ok.error());
    }
    sockaddr_storage ss{};
    socklen_t len = to_sockaddr(bind_addr, ss);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      return base::fail_errno("bind " + addr.to_string() + where_of(netns), errno);
    }
    if (::listen(fd.get(), options.backlog) != 0) {
      return base::fail_errno("listen " + addr.to_string() + where_of(netns), errno);
    }
    return fd;
  };
  return create_in(netns, make);
}

Result<UniqueFd> make_connect_socket(const base::Netns* netns, const SocketAddr& addr, std::uint32_t mark,
                                     const base::IpAddr* transparent_source) {
  auto make = [&]() -> Result<UniqueFd> {
    UniqueFd fd(::socket(addr.ip.is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) return base::fail_errno("socket to " + addr.to_string() + where_of(netns), errno);
    if (mark != 0 && ::setsockopt(fd.get(), SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) != 0) {
      return base::fail_errno("SO_MARK on socket to " + addr.to_string(), errno);
    }
    // Ignored: without TCP_NODELAY the bytes still flow, only small writes may wait for an ACK.
    (void)set_int(fd.get(), IPPROTO_TCP, TCP_NODELAY, 1, "TCP_NODELAY", addr.to_string());
    if (transparent_source != nullptr && transparent_source->is_v4() == addr.ip.is_v4()) {
      int level = addr.ip.is_v4() ? SOL_IP : SOL_IPV6;
      int option = addr.ip.is_v4() ? IP_TRANSPARENT : IPV6_TRANSPARENT;
      if (::setsockopt(fd.get(), level, option, &kOne, sizeof(kOne)) != 0) {
        return base::fail_errno("IP_TRANSPARENT on socket to " + addr.to_string(), errno);
      }
      sockaddr_storage ss{};
      socklen_t len = to_sockaddr(SocketAddr{*transparent_source, 0}, ss);
      if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        return base::fail_errno("bind to client address " + transparent_source->to_string(), errno);
      }
    }
    return fd;
  };
  return create_in(netns, make);
}

Result<std::vector<base::IpAddr>> interface_addresses(const base::Netns& netns) {
  std::vector<base::IpAddr> out;
  int err = 0;
  auto entered = netns.run_in([&] {
    ifaddrs* list = nullptr;
    if (::getifaddrs(&list) != 0) {
      err = errno;
      return;
    }
    for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr) continue;
      auto family = it->ifa_addr->sa_family;
      if (family != AF_INET && family != AF_INET6) continue;
      sockaddr_storage ss{};
      std::memcpy(&ss, it->ifa_addr, family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
      auto addr = from_sockaddr(ss);
      if (!addr || addr->ip.is_loopback()) continue;
      auto bytes = addr->ip.bytes();
      bool link_local_v6 = !addr->ip.is_v4() && static_cast<unsigned char>(bytes[0]) == 0xfe &&
                           (static_cast<unsigned char>(bytes[1]) & 0xc0) == 0x80;
      if (!link_local_v6) out.push_back(addr->ip);
    }
    ::freeifaddrs(list);
  });
  if (!entered) return std::unexpected(entered.error());
  if (err != 0) return base::fail_errno("getifaddrs in netns " + netns.description(), err);
  return out;
}

Result<SocketAddr> original_dst(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(sockaddr_in);
  if (::getsockopt(fd, SOL_IP, kSoOriginalDst, &ss, &len) == 0) return from_sockaddr(ss);
  len = sizeof(sockaddr_in6);
  if (::getsockopt(fd, SOL_IPV6, kIp6tSoOriginalDst, &ss, &len) == 0) return from_sockaddr(ss);
  return local_addr(fd);
}

Result<SocketAddr> local_addr(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return base::fail_errno("getsockname", errno);
  return from_sockaddr(ss);
}

Result<SocketAddr> peer_addr(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return base::fail_errno("getpeername", errno);
  return from_sockaddr(ss);
}

}  // namespace meshnode::net
