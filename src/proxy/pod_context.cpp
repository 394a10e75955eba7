#include "proxy/pod_context.hpp"

#include <fmt/format.h>

#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "net/awaitable.hpp"
#include "net/deadline.hpp"

namespace meshnode::proxy {

using base::Errc;
using base::fail;

namespace {

// The largest MTU of the non-loopback interfaces in the netns `fd` was created in (netdevice
// ioctls act on the socket's namespace, so no setns is needed): SIOCGIFCONF lists the IPv4
// interfaces, "eth0" is the fallback for an IPv6-only pod. 0 when none is found.
int pod_interface_mtu(int fd) {
  std::array<ifreq, 32> reqs{};
  ifconf conf{};
  conf.ifc_len = static_cast<int>(sizeof(reqs));
  conf.ifc_req = reqs.data();
  std::vector<std::string> names;
  if (::ioctl(fd, SIOCGIFCONF, &conf) == 0) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(conf.ifc_len) / sizeof(ifreq); ++i) {
      names.emplace_back(reqs[i].ifr_name, strnlen(reqs[i].ifr_name, IFNAMSIZ));
    }
  }
  if (names.empty()) names.emplace_back("eth0");
  int best = 0;
  for (const auto& name : names) {
    ifreq req{};
    std::memcpy(req.ifr_name, name.data(), std::min<std::size_t>(name.size(), IFNAMSIZ - 1));
    if (::ioctl(fd, SIOCGIFFLAGS, &req) != 0 || (req.ifr_flags & IFF_LOOPBACK) != 0) continue;
    if (::ioctl(fd, SIOCGIFMTU, &req) == 0) best = std::max(best, req.ifr_mtu);
  }
  return best;
}

}  // namespace

int mss_for_mtu(int mtu, bool ipv4) {
  // IP + TCP headers, plus 12 bytes of TCP timestamps (Linux uses them by default): 1448 for 1500.
  const int overhead = (ipv4 ? 20 : 40) + 20 + 12;
  return mtu > overhead + 88 ? mtu - overhead : 0;  // below IPv4's minimum (576 - 40) nothing sane
}

std::string TraceId::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

namespace {

hbone::ClientPool::Options pool_options(const ProxyInputs& in) {
  auto options = in.options.pool;
  options.refused_retries = &in.metrics.hbone_refused_retries();
  return options;
}

}  // namespace

PodContext::PodContext(asio::io_context& io_context, std::shared_ptr<const PodInfo> pod_info, const ProxyInputs& in)
    : io(io_context),
      pod(std::move(pod_info)),
      inputs(in),
      pool(io.get_executor(), pod->netns, in.certs, in.sockets, in.tasks, pool_options(in)),
      handshakes(in.options.max_handshakes_per_listener, in.options.max_handshakes_per_source,
                 in.options.handshake_evict_after),
      rng_(std::random_device{}()) {}

TraceId PodContext::next_trace_id() {
  TraceId id;
  id.hi = rng_();
  id.lo = rng_();
  return id;
}

std::shared_ptr<const state::Workload> PodContext::local_workload(const state::StateSnapshot& snapshot) const {
  if (auto workload = snapshot.workload_by_uid(pod->uid)) return workload;
  return pod->workload;
}

void PodContext::clamp_in_pod_mss(int fd, bool ipv4) {
  if (!in_pod_mtu_) in_pod_mtu_ = pod_interface_mtu(fd);  // the pod's interfaces do not change
  const int mss = mss_for_mtu(*in_pod_mtu_, ipv4);
  // Ignored on failure: the connection works, only small-window apps stay slow (as before).
  if (mss > 0) (void)::setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof(mss));
}

bool PodContext::is_own_ip(const base::IpAddr& ip) const {
  return std::find(pod->ips.begin(), pod->ips.end(), ip) != pod->ips.end();
}

asio::awaitable<base::Result<asio::ip::tcp::socket>> PodContext::connect_upstream(const base::NextHop& next_hop,
                                                                                  const base::ClientAddr* client) {
  const base::IpAddr* source = inputs.options.transparent_inbound && client != nullptr ? &client->addr.ip : nullptr;
  auto dialable = inputs.sockets.upstream(pod->netns.get(), next_hop.addr, net::kProxyMark, source);
  if (!dialable) co_return std::unexpected(std::move(dialable.error()));
  const base::SocketAddr& addr = dialable->address;
  if (is_own_ip(next_hop.addr.ip) || next_hop.addr.ip.is_loopback()) clamp_in_pod_mss(dialable->fd.get(), addr.ip.is_v4());
  asio::ip::tcp::socket socket(io);
  std::error_code ec;
  socket.assign(addr.ip.is_v4() ? asio::ip::tcp::v4() : asio::ip::tcp::v6(), dialable->fd.release(), ec);
  if (ec) co_return fail(Errc::kIo, "assign upstream socket", ec);
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(addr.ip.to_string(), ec), addr.port);
  net::Deadline deadline(io.get_executor(), inputs.options.connect_timeout, [&socket] {
    std::error_code ignored;
    socket.close(ignored);
  });
  auto [cec] = co_await socket.async_connect(endpoint, net::kNoThrow);
  if (cec) {
    if (deadline.expired()) co_return fail(Errc::kTimeout, "connect to " + next_hop.to_string() + " timed out");
    co_return fail(Errc::kConnectFailed, "connect to " + next_hop.to_string(), cec);
  }
  co_return std::move(socket);
}

}  // namespace meshnode::proxy
