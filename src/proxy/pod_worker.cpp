#include "proxy/pod_worker.hpp"

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "net/awaitable.hpp"
#include "net/deadline.hpp"
#include "net/socket.hpp"

namespace meshnode::proxy {

using base::Errc;
using base::fail;

std::string_view to_string(ListenerKind kind) noexcept {
  switch (kind) {
    case ListenerKind::kOutbound: return "outbound";
    case ListenerKind::kInboundPlaintext: return "inbound_plaintext";
    case ListenerKind::kInboundHbone: return "inbound_hbone";
    case ListenerKind::kSocks5: return "socks5";
  }
  return "unknown";
}

PodWorker::PodWorker(asio::io_context& io, std::shared_ptr<const PodInfo> pod, const ProxyShared& shared)
    : io_(io),
      pod_(std::move(pod)),
      shared_(shared),
      pool_(io.get_executor(), pod_->netns, shared.certs, shared.options.pool),
      rng_(std::random_device{}()) {}

PodWorker::~PodWorker() = default;

void PodWorker::start(std::vector<ListenerFd> listeners) {
  for (auto& l : listeners) {
    auto acceptor = std::make_shared<asio::ip::tcp::acceptor>(io_);
    auto local = net::local_addr(l.fd.get());
    std::error_code ec;
    acceptor->assign(local && local->ip.is_v4() ? asio::ip::tcp::v4() : asio::ip::tcp::v6(), l.fd.release(), ec);
    if (ec) {
      spdlog::error("pod={} listener={} cannot be used: {}", pod_->uid, to_string(l.kind), ec.message());
      continue;
    }
    acceptors_.push_back(acceptor);
    asio::co_spawn(io_, accept_loop(l.kind, acceptor), asio::detached);
  }
}

void PodWorker::stop_accepting() {
  stopped_ = true;
  for (auto& a : acceptors_) {
    std::error_code ec;
    a->close(ec);
  }
  acceptors_.clear();
  for (auto& weak : inbound_sessions_) {
    if (auto s = weak.lock()) s->drain();
  }
}

void PodWorker::recheck_policies(const state::StateSnapshot& snapshot) {
  auto closed = tracker_.recheck_all(snapshot);
  if (closed > 0) spdlog::info("pod={} policy change closed {} connection(s)", pod_->uid, closed);
}

void PodWorker::abort_all() {
  tracker_.abort_all();
  for (auto& weak : inbound_sessions_) {
    if (auto s = weak.lock()) s->abort("pod removed");
  }
  inbound_sessions_.clear();
  pool_.close_all();
}

asio::awaitable<void> PodWorker::accept_loop(ListenerKind kind, std::shared_ptr<asio::ip::tcp::acceptor> acceptor) {
  auto self = shared_from_this();
  while (!stopped_) {
    auto [ec, socket] = co_await acceptor->async_accept(net::kNoThrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) break;
      // EMFILE and friends: log and keep serving; back off briefly so we do not spin.
      spdlog::warn("pod={} listener={} accept failed: {}", pod_->uid, to_string(kind), ec.message());
      asio::steady_timer pause(io_, std::chrono::milliseconds(50));
      co_await pause.async_wait(net::kNoThrow);
      continue;
    }
    socket.set_option(asio::ip::tcp::no_delay(true), ec);
    switch (kind) {
      case ListenerKind::kOutbound:
        asio::co_spawn(io_, handle_outbound(std::move(socket)), asio::detached);
        break;
      case ListenerKind::kSocks5:
        asio::co_spawn(io_, handle_socks5(std::move(socket)), asio::detached);
        break;
      case ListenerKind::kInboundPlaintext:
        asio::co_spawn(io_, handle_inbound_plaintext(std::move(socket)), asio::detached);
        break;
      case ListenerKind::kInboundHbone:
        asio::co_spawn(io_, handle_hbone_connection(std::move(socket)), asio::detached);
        break;
    }
  }
}

asio::awaitable<base::Result<asio::ip::tcp::socket>> PodWorker::connect_upstream(const base::NextHop& next_hop,
                                                                                 const base::ClientAddr* client) {
  const base::SocketAddr& addr = next_hop.addr;
  const base::IpAddr* source = shared_.options.transparent_inbound && client != nullptr ? &client->addr.ip : nullptr;
  auto fd = net::make_connect_socket(pod_->netns.get(), addr, net::kProxyMark, source);
  if (!fd) co_return std::unexpected(fd.error());
  asio::ip::tcp::socket socket(io_);
  std::error_code ec;
  socket.assign(addr.ip.is_v4() ? asio::ip::tcp::v4() : asio::ip::tcp::v6(), fd->release(), ec);
  if (ec) co_return fail(Errc::kIo, "assign upstream socket", ec);
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address(addr.ip.to_string(), ec), addr.port);
  net::Deadline deadline(io_.get_executor(), shared_.options.connect_timeout, [&socket] {
    std::error_code ignored;
    socket.close(ignored);
  });
  auto [cec] = co_await socket.async_connect(endpoint, net::kNoThrow);
  if (cec) {
    if (deadline.expired()) co_return fail(Errc::kTimeout, "connect to " + addr.to_string() + " timed out");
    co_return fail(Errc::kConnectFailed, "connect to " + addr.to_string(), cec);
  }
  co_return std::move(socket);
}

bool PodWorker::is_own_ip(const base::IpAddr& ip) const {
  return std::find(pod_->ips.begin(), pod_->ips.end(), ip) != pod_->ips.end();
}

std::string PodWorker::next_trace_id() { return fmt::format("{:016x}{:016x}", rng_(), rng_()); }

}  // namespace meshnode::proxy
