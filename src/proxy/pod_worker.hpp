#pragma once

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <cstddef>
#include <memory>
#include <vector>

#include "proxy/inbound.hpp"
#include "proxy/inbound_passthrough.hpp"
#include "proxy/inputs.hpp"
#include "proxy/outbound.hpp"
#include "proxy/pod_context.hpp"
#include "proxy/socks5_server.hpp"
#include "state/snapshot.hpp"

namespace meshnode::proxy {

/// One pod's proxy on one worker thread: its listeners' accept loops, each handing a connection to
/// its path (Outbound, Socks5, Inbound, InboundPassthrough, over one shared PodContext). Every
/// accept loop and connection is a task of the data-path DrainScope (ProxyInputs::tasks) that keeps
/// this worker alive. Every method except `active()` must run on the worker's thread (post to it).
/// A connection is served to its end on one worker (DESIGN §4): the one that accepted it, or the
/// less loaded one it was handed to right after the accept.
class PodWorker : public std::enable_shared_from_this<PodWorker> {
 public:
  /// `index` is the worker's place in ProxyInputs::loads (0 when there is none).
  PodWorker(asio::io_context& io, std::shared_ptr<const PodInfo> pod, const ProxyInputs& inputs,
            std::size_t index = 0);
  ~PodWorker();

  /// The same pod's PodWorkers on every worker, by worker index (this one included), which
  /// accepted connections may be handed to (ProxyInputs::loads). Before start(); not owning (they
  /// own nothing of each other).
  void set_siblings(std::vector<std::weak_ptr<PodWorker>> siblings) { siblings_ = std::move(siblings); }

  /// Takes the listeners and starts accepting on them.
  void start(std::vector<ListenerFd> listeners);
  /// Closes the listeners; inbound HBONE peers get GOAWAY and pooled outbound connections are
  /// drained (they close once their streams end). Open connections go on.
  void stop_accepting();
  /// Resets every open connection of this pod now.
  void abort_all();
  /// Re-authorizes every live inbound connection on `snapshot`; closes those now denied.
  void recheck_policies(const state::StateSnapshot& snapshot);
  /// Open connections (inbound + outbound). Any thread.
  [[nodiscard]] std::size_t active() const noexcept { return ctx_.tracker.size(); }

 private:
  /// `protocol`: the listener's (v4 or v6), which its accepted sockets share.
  asio::awaitable<void> accept_loop(ListenerKind kind, asio::ip::tcp protocol,
                                    std::shared_ptr<asio::ip::tcp::acceptor> acceptor);
  /// Serves one accepted connection here, or on the sibling whose worker has the fewest open
  /// connections (ProxyInputs::loads), counted there from now on.
  void route(ListenerKind kind, asio::ip::tcp protocol, asio::ip::tcp::socket socket);
  /// On this worker's thread: takes a connection another worker accepted for this pod and counted
  /// on this one (`fd` is its socket).
  void adopt(ListenerKind kind, base::UniqueFd fd, asio::ip::tcp protocol);
  /// Spawns the path serving `kind` for one accepted connection; `counted`: it is counted in
  /// ProxyInputs::loads on this worker until its task ends.
  void dispatch(ListenerKind kind, asio::ip::tcp::socket socket, bool counted);

  PodContext ctx_;
  Outbound outbound_{ctx_};
  Socks5 socks5_{ctx_, outbound_};
  Inbound inbound_{ctx_};
  InboundPassthrough passthrough_{ctx_};
  std::vector<std::shared_ptr<asio::ip::tcp::acceptor>> acceptors_;
  std::vector<std::weak_ptr<PodWorker>> siblings_;
  std::size_t index_;
};

}  // namespace meshnode::proxy
