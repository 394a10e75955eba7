#include "proxy/pod_context.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "net/awaitable.hpp"
#include "net/deadline.hpp"

namespace meshnode::proxy {

using base::Errc;
using base::fail;

std::string TraceId::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

PodContext::PodContext(asio::io_context& io_context, std::shared_ptr<const PodInfo> pod_info, const ProxyInputs& in)
    : io(io_context),
      pod(std::move(pod_info)),
      inputs(in),
      pool(io.get_executor(), pod->netns, in.certs, in.sockets, in.tasks, in.options.pool),
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

bool PodContext::is_own_ip(const base::IpAddr& ip) const {
  return std::find(pod->ips.begin(), pod->ips.end(), ip) != pod->ips.end();
}

asio::awaitable<base::Result<asio::ip::tcp::socket>> PodContext::connect_upstream(const base::NextHop& next_hop,
                                                                                  const base::ClientAddr* client) {
  const base::IpAddr* source = inputs.options.transparent_inbound && client != nullptr ? &client->addr.ip : nullptr;
  auto dialable = inputs.sockets.upstream(pod->netns.get(), next_hop.addr, net::kProxyMark, source);
  if (!dialable) co_return std::unexpected(std::move(dialable.error()));
  const base::SocketAddr& addr = dialable->address;
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
