#pragma once

#include <memory>
#include <span>
#include <vector>

#include "base/error.hpp"
#include "proxy/inputs.hpp"
#include "proxy/pod_worker.hpp"

namespace asio {
class io_context;
}

namespace meshnode::inpod {

/// The listeners of one enrolled pod, inside the pod's netns, on every data worker: 15001
/// outbound, 15006 inbound plaintext, 15008 inbound HBONE (and 15080 socks5 on 127.0.0.1 when
/// enabled). Independent of how the pod was enrolled (command line now, ZDS later).
/// Methods are called from the control thread; work is posted to the workers.
class PodListenerSet {
 public:
  struct Options {
    bool socks5 = false;
  };

  /// Binds the pod's listeners inside `pod->netns` (SO_REUSEPORT, one socket per worker and port,
  /// through `inputs.sockets`) on the calling thread, then starts a PodWorker on each worker with
  /// its sockets.
  /// @returns Errc::kIo naming the port and netns when a bind fails (e.g. the port is already
  ///          taken in that netns); nothing is left open then.
  [[nodiscard]] static base::Result<std::unique_ptr<PodListenerSet>> start(std::shared_ptr<const proxy::PodInfo> pod,
                                                                           std::span<asio::io_context* const> workers,
                                                                           const proxy::ProxyInputs& inputs,
                                                                           Options options);
  ~PodListenerSet();

  /// Closes the listeners (another process with SO_REUSEPORT keeps accepting); open connections
  /// continue; inbound HBONE peers get GOAWAY.
  void stop_accepting();
  /// Resets every open connection of the pod now.
  void abort_connections();
  /// Re-authorizes the pod's live inbound connections on `snapshot` (after a policy change);
  /// those now denied are closed. Asynchronous: runs on each worker.
  void recheck_policies(std::shared_ptr<const state::StateSnapshot> snapshot);
  /// Open connections across workers. Approximate while workers run.
  [[nodiscard]] std::size_t active_connections() const;
  [[nodiscard]] const proxy::PodInfo& pod() const noexcept { return *pod_; }

 private:
  PodListenerSet(std::shared_ptr<const proxy::PodInfo> pod) : pod_(std::move(pod)) {}

  struct WorkerPart {
    asio::io_context* io;
    std::shared_ptr<proxy::PodWorker> worker;
  };
  std::shared_ptr<const proxy::PodInfo> pod_;
  std::vector<WorkerPart> parts_;
};

}  // namespace meshnode::inpod
