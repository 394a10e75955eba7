#include "fakes/direct_sockets.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <cerrno>

namespace meshnode::fakes {
namespace {

using base::Errc;
using base::fail;
using base::Result;
using base::SocketAddr;
using base::UniqueFd;

constexpr int kOne = 1;

Result<UniqueFd> bound_socket(const SocketAddr& addr, bool listen, bool reuse_port) {
  UniqueFd fd(::socket(addr.ip.is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd) return base::fail_errno("socket", errno);
  if (listen && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &kOne, sizeof(kOne)) != 0) {
    return base::fail_errno("SO_REUSEADDR", errno);
  }
  if (reuse_port && ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEPORT, &kOne, sizeof(kOne)) != 0) {
    return base::fail_errno("SO_REUSEPORT", errno);
  }
  if (!listen && ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &kOne, sizeof(kOne)) != 0) {
    return base::fail_errno("TCP_NODELAY", errno);
  }
  sockaddr_storage ss{};
  socklen_t len = net::to_sockaddr(addr, ss);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0) return base::fail_errno("bind " + addr.to_string(), errno);
  if (listen && ::listen(fd.get(), 128) != 0) return base::fail_errno("listen " + addr.to_string(), errno);
  return fd;
}

}  // namespace

Result<std::shared_ptr<const base::Netns>> DirectSockets::make_netns(const std::string& name,
                                                                     std::vector<base::IpAddr> ips) {
  UniqueFd fd(::memfd_create(("meshnode-test-netns-" + name).c_str(), MFD_CLOEXEC));
  if (!fd) return base::fail_errno("memfd_create", errno);
  auto netns = base::Netns::from_fd(std::move(fd), "direct:" + name);
  if (!netns) return std::unexpected(netns.error());
  std::lock_guard lock(mu_);
  ips_[key_of(*netns)] = std::move(ips);
  return std::make_shared<const base::Netns>(std::move(*netns));
}

void DirectSockets::redirect(const SocketAddr& client, const SocketAddr& orig_dst) {
  std::lock_guard lock(mu_);
  redirects_[client] = orig_dst;
}

SocketAddr DirectSockets::bound(const SocketAddr& addr) const {
  std::lock_guard lock(mu_);
  auto it = ports_.find(addr);
  return it == ports_.end() ? addr : SocketAddr{addr.ip, it->second};
}

void DirectSockets::fail_listeners_in(const base::Netns& netns, bool fail) {
  std::lock_guard lock(mu_);
  failing_[key_of(netns)] = fail;
}

int DirectSockets::listeners_created() const {
  std::lock_guard lock(mu_);
  return listeners_;
}

Result<base::IpAddr> DirectSockets::source_ip(const base::Netns& netns) const {
  auto it = ips_.find(key_of(netns));
  if (it == ips_.end() || it->second.empty()) {
    return fail(Errc::kInvalidArgument, "netns " + netns.description() + " is not a direct-test netns");
  }
  return it->second.front();
}

Result<UniqueFd> DirectSockets::listener(const base::Netns* netns, const SocketAddr& addr,
                                         const net::ListenOptions&) {
  std::lock_guard lock(mu_);
  if (netns == nullptr) return bound_socket(addr, true, true);
  if (failing_[key_of(*netns)]) {
    return fail(Errc::kIo, "bind " + addr.to_string() + " in netns " + netns->description(),
                std::error_code(EADDRINUSE, std::system_category()));
  }
  auto ip = source_ip(*netns);
  if (!ip) return std::unexpected(ip.error());
  const SocketAddr asked{*ip, addr.port};
  auto known = ports_.find(asked);
  auto fd = bound_socket({*ip, known == ports_.end() ? std::uint16_t{0} : known->second}, true, true);
  if (!fd) return fd;
  auto local = net::local_addr(fd->get());
  if (!local) return std::unexpected(local.error());
  ports_[asked] = local->port;
  ++listeners_;
  return fd;
}

Result<net::Dialable> DirectSockets::upstream(const base::Netns* netns, const SocketAddr& destination, std::uint32_t,
                                              const base::IpAddr*) {
  std::lock_guard lock(mu_);
  SocketAddr from{destination.ip.is_v4() ? base::IpAddr::v4({0, 0, 0, 0}) : base::IpAddr::v6({}), 0};
  if (netns != nullptr) {
    auto ip = source_ip(*netns);
    if (!ip) return std::unexpected(ip.error());
    from.ip = *ip;
  }
  auto fd = bound_socket(from, false, false);
  if (!fd) return std::unexpected(fd.error());
  auto mapped = ports_.find(destination);
  const SocketAddr to = mapped == ports_.end() ? destination : SocketAddr{destination.ip, mapped->second};
  return net::Dialable{std::move(*fd), to};
}

void DirectSockets::no_original_dst(const SocketAddr& client) {
  std::lock_guard lock(mu_);
  no_original_dst_.insert(client);
}

Result<SocketAddr> DirectSockets::original_dst(int fd) {
  auto peer = net::peer_addr(fd);
  if (peer) {
    std::lock_guard lock(mu_);
    if (auto it = redirects_.find(*peer); it != redirects_.end()) return it->second;
    if (no_original_dst_.contains(*peer)) return fail(Errc::kIo, "getsockopt SO_ORIGINAL_DST: no NAT entry (test)");
  }
  return net::local_addr(fd);
}

Result<std::vector<base::IpAddr>> DirectSockets::interface_addresses(const base::Netns& netns) {
  std::lock_guard lock(mu_);
  auto it = ips_.find(key_of(netns));
  if (it == ips_.end()) return fail(Errc::kIo, "getifaddrs in netns " + netns.description() + ": not a direct-test netns");
  return it->second;
}

}  // namespace meshnode::fakes
