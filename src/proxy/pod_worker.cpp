#include "proxy/pod_worker.hpp"

#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <string>

#include "net/awaitable.hpp"
#include "net/socket.hpp"

namespace meshnode::proxy {

std::string_view to_string(ListenerKind kind) noexcept {
  switch (kind) {
    case ListenerKind::kOutbound: return "outbound";
    case ListenerKind::kInboundPlaintext: return "inbound_plaintext";
    case ListenerKind::kInboundHbone: return "inbound_hbone";
    case ListenerKind::kSocks5: return "socks5";
  }
  return "unknown";
}

namespace {

// A connection's place in its worker's count, given back when its task ends (the task keeps its
// owner alive until then).
struct Counted {
  Counted(std::shared_ptr<const void> o, WorkerLoads* l, std::size_t w) : owner(std::move(o)), loads(l), worker(w) {}
  Counted(const Counted&) = delete;
  Counted& operator=(const Counted&) = delete;
  ~Counted() { loads->remove(worker); }

  std::shared_ptr<const void> owner;
  WorkerLoads* loads;
  std::size_t worker;
};

}  // namespace

PodWorker::PodWorker(asio::io_context& io, std::shared_ptr<const PodInfo> pod, const ProxyInputs& inputs,
                     std::size_t index)
    : ctx_(io, std::move(pod), inputs), index_(index) {}

PodWorker::~PodWorker() = default;

void PodWorker::start(std::vector<ListenerFd> listeners) {
  for (auto& l : listeners) {
    auto acceptor = std::make_shared<asio::ip::tcp::acceptor>(ctx_.io);
    auto local = net::local_addr(l.fd.get());
    const asio::ip::tcp protocol = local && local->ip.is_v4() ? asio::ip::tcp::v4() : asio::ip::tcp::v6();
    std::error_code ec;
    acceptor->assign(protocol, l.fd.release(), ec);
    if (ec) {
      spdlog::error("pod={} listener={} cannot be used: {}", ctx_.pod->uid, to_string(l.kind), ec.message());
      continue;
    }
    acceptors_.push_back(acceptor);
    std::string id = "accept " + std::string(to_string(l.kind)) + " pod=" + ctx_.pod->uid;
    ctx_.inputs.tasks.spawn(ctx_.io.get_executor(), accept_loop(l.kind, protocol, acceptor), std::move(id), shared_from_this());
  }
}

void PodWorker::stop_accepting() {
  ctx_.stopped = true;
  for (auto& a : acceptors_) {
    std::error_code ec;
    a->close(ec);
  }
  acceptors_.clear();
  for (auto& weak : ctx_.inbound_sessions) {
    if (auto s = weak.lock()) s->drain();
  }
  ctx_.pool.drain_all();
}

void PodWorker::recheck_policies(const state::StateSnapshot& snapshot) {
  auto closed = ctx_.tracker.recheck_all(snapshot);
  if (closed > 0) spdlog::info("pod={} policy change closed {} connection(s)", ctx_.pod->uid, closed);
}

void PodWorker::abort_all() {
  ctx_.tracker.abort_all();
  for (auto& weak : ctx_.inbound_sessions) {
    if (auto s = weak.lock()) s->abort("pod removed");
  }
  ctx_.inbound_sessions.clear();
  ctx_.pool.close_all();
}

asio::awaitable<void> PodWorker::accept_loop(ListenerKind kind, asio::ip::tcp protocol,
                                             std::shared_ptr<asio::ip::tcp::acceptor> acceptor) {
  while (!ctx_.stopped) {
    auto [ec, socket] = co_await acceptor->async_accept(net::kNoThrow);
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor->is_open()) break;
      // EMFILE and friends: log and keep serving; back off briefly so we do not spin.
      spdlog::warn("pod={} listener={} accept failed: {}", ctx_.pod->uid, to_string(kind), ec.message());
      asio::steady_timer pause(ctx_.io, std::chrono::milliseconds(50));
      co_await pause.async_wait(net::kNoThrow);
      continue;
    }
    // Ignored: Nagle only delays; a socket that refuses TCP_NODELAY still carries the bytes.
    socket.set_option(asio::ip::tcp::no_delay(true), ec);
    route(kind, protocol, std::move(socket));
  }
}

void PodWorker::route(ListenerKind kind, asio::ip::tcp protocol, asio::ip::tcp::socket socket) {
  WorkerLoads* loads = ctx_.inputs.loads;
  if (loads == nullptr || siblings_.size() != loads->size() || index_ >= loads->size()) {
    dispatch(kind, std::move(socket), false);
    return;
  }
  const std::size_t to = loads->pick(index_);
  loads->add(to);
  if (to != index_) {
    if (auto sibling = siblings_[to].lock()) {
      // release() takes the socket out of this worker's epoll; the sibling registers it in its own.
      std::error_code ec;
      base::UniqueFd fd(socket.release(ec));
      if (!ec) {
        loads->count_handoff();
        asio::post(sibling->ctx_.io, [sibling, kind, fd = std::move(fd), protocol]() mutable {
          sibling->adopt(kind, std::move(fd), protocol);
        });
        return;
      }
    }
    // The sibling is gone (its pod is being removed) or the socket cannot move: serve it here.
    loads->remove(to);
    loads->add(index_);
  }
  dispatch(kind, std::move(socket), true);
}

void PodWorker::adopt(ListenerKind kind, base::UniqueFd fd, asio::ip::tcp protocol) {
  if (ctx_.stopped) {
    ctx_.inputs.loads->remove(index_);
    return;  // the listeners are closed: the pod is leaving; fd closes with it
  }
  asio::ip::tcp::socket socket(ctx_.io);
  std::error_code ec;
  socket.assign(protocol, fd.get(), ec);
  if (ec) {
    ctx_.inputs.loads->remove(index_);
    spdlog::warn("pod={} listener={} connection hand-off failed: {}", ctx_.pod->uid, to_string(kind), ec.message());
    return;
  }
  (void)fd.release();
  dispatch(kind, std::move(socket), true);
}

void PodWorker::dispatch(ListenerKind kind, asio::ip::tcp::socket socket, bool counted) {
  const TraceId id = ctx_.next_trace_id();
  auto ex = ctx_.io.get_executor();
  auto self = shared_from_this();
  std::shared_ptr<const void> owner = self;
  if (counted) owner = std::make_shared<const Counted>(self, ctx_.inputs.loads, index_);
  auto& tasks = ctx_.inputs.tasks;
  switch (kind) {
    case ListenerKind::kOutbound: tasks.spawn(ex, outbound_.serve(std::move(socket), id), id.hex(), std::move(owner)); break;
    case ListenerKind::kSocks5: tasks.spawn(ex, socks5_.serve(std::move(socket), id), id.hex(), std::move(owner)); break;
    case ListenerKind::kInboundPlaintext:
      tasks.spawn(ex, passthrough_.serve(std::move(socket), id), id.hex(), std::move(owner));
      break;
    case ListenerKind::kInboundHbone:
      // The session outlives this task (its streams run as tasks of their own) and holds `owner`
      // until it ends: so the connection counts on this worker for as long as it is open.
    {
      auto session_owner = owner;  // a copy before the call: its arguments' order is unspecified
      tasks.spawn(ex, inbound_.serve(std::move(socket), id, std::move(session_owner)), id.hex(), std::move(owner));
      break;
    }
  }
}

}  // namespace meshnode::proxy
