#include "inpod/listener_set.hpp"

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <spdlog/spdlog.h>

#include "net/socket.hpp"
#include "state/route.hpp"

namespace meshnode::inpod {
namespace {

struct PortSpec {
  proxy::ListenerKind kind;
  base::SocketAddr addr;
};

std::vector<PortSpec> ports_for(const PodListenerSet::Options& options) {
  auto any = base::IpAddr::v4({0, 0, 0, 0});
  std::vector<PortSpec> ports = {
      {proxy::ListenerKind::kOutbound, {any, state::kOutboundPort}},
      {proxy::ListenerKind::kInboundPlaintext, {any, state::kInboundPlaintextPort}},
      {proxy::ListenerKind::kInboundHbone, {any, state::kInboundHbonePort}},
  };
  if (options.socks5) ports.push_back({proxy::ListenerKind::kSocks5, {base::IpAddr::v4({127, 0, 0, 1}), state::kSocks5Port}});
  return ports;
}

}  // namespace

base::Result<std::unique_ptr<PodListenerSet>> PodListenerSet::start(std::shared_ptr<const proxy::PodInfo> pod,
                                                                    std::span<asio::io_context* const> workers,
                                                                    const proxy::ProxyInputs& inputs, Options options) {
  // Bind everything first so a failure leaves nothing half-started.
  std::vector<std::vector<proxy::ListenerFd>> per_worker(workers.size());
  for (const auto& spec : ports_for(options)) {
    for (auto& fds : per_worker) {
      auto fd = inputs.sockets.listener(pod->netns.get(), spec.addr, net::ListenOptions{});
      if (!fd) return std::unexpected(fd.error());
      fds.push_back(proxy::ListenerFd{spec.kind, std::move(*fd)});
    }
  }
  std::unique_ptr<PodListenerSet> set(new PodListenerSet(pod));
  // Each worker's PodWorker knows the others, to hand them connections (proxy::WorkerLoads); the
  // worker index is its place in the span, as in ProxyInputs::loads.
  std::vector<std::weak_ptr<proxy::PodWorker>> siblings;
  for (std::size_t i = 0; i < workers.size(); ++i) {
    auto worker = std::make_shared<proxy::PodWorker>(*workers[i], pod, inputs, i);
    siblings.push_back(worker);
    set->parts_.push_back(WorkerPart{workers[i], std::move(worker)});
  }
  for (std::size_t i = 0; i < workers.size(); ++i) {
    auto& worker = set->parts_[i].worker;
    worker->set_siblings(siblings);
    asio::post(*workers[i], [worker, fds = std::make_shared<std::vector<proxy::ListenerFd>>(std::move(per_worker[i]))] {
      worker->start(std::move(*fds));
    });
  }
  spdlog::info("pod={} name={}/{} identity={} listeners up in netns {}", pod->uid, pod->ns, pod->name,
               pod->identity.to_string(), pod->netns->description());
  return set;
}

PodListenerSet::~PodListenerSet() {
  for (auto& part : parts_) {
    asio::post(*part.io, [worker = part.worker] {
      worker->stop_accepting();
      worker->abort_all();
    });
  }
}

void PodListenerSet::stop_accepting() {
  for (auto& part : parts_) asio::post(*part.io, [worker = part.worker] { worker->stop_accepting(); });
}

void PodListenerSet::abort_connections() {
  for (auto& part : parts_) asio::post(*part.io, [worker = part.worker] { worker->abort_all(); });
}

void PodListenerSet::recheck_policies(std::shared_ptr<const state::StateSnapshot> snapshot) {
  for (auto& part : parts_) {
    asio::post(*part.io, [worker = part.worker, snapshot] { worker->recheck_policies(*snapshot); });
  }
}

std::size_t PodListenerSet::active_connections() const {
  std::size_t n = 0;
  for (const auto& part : parts_) n += part.worker->active();
  return n;
}

}  // namespace meshnode::inpod
