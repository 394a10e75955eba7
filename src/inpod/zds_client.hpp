#pragma once

#include <asio/awaitable.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>

#include <chrono>
#include <memory>
#include <string>

#include "telemetry/readiness.hpp"
#include "base/unique_fd.hpp"
#include "inpod/workload_manager.hpp"
#include "net/drain_scope.hpp"

namespace meshnode::inpod {

/// The proxy side of ZDS (Istio ZDS protocol, research §2.2): connects to the node agent's
/// SOCK_SEQPACKET socket, sends ZdsHello{V1}, then answers every request with exactly one Ack
/// and sends nothing unsolicited. AddWorkload/KeepWorkload/DelWorkload/SnapshotSent drive the
/// WorkloadManager. A malformed request gets Ack{error} and the connection is re-made (the
/// reference proxy exits instead; we never do). Reconnects with backoff 10 ms doubling to 15 s;
/// pods keep serving while disconnected. Readiness: "zds connection" until connected,
/// "zds snapshot" until SnapshotSent. Control thread only.
class ZdsClient {
 public:
  /// `tasks` runs the connection loop; it and every reference must outlive the client.
  ZdsClient(asio::io_context& control, std::string path, WorkloadManager& manager, telemetry::Readiness& readiness,
            telemetry::MetricsRegistry& registry, net::DrainScope& tasks);
  void start();
  /// Stops reconnecting and closes the connection. The loop ends soon after (its task leaves
  /// `tasks`); destroy the client only once it has, or once the control io_context no longer runs.
  void stop();

 private:
  asio::awaitable<void> run();
  /// One connected session; returns when it ends (peer closed, bad input, stop()).
  asio::awaitable<void> session(base::UniqueFd fd);
  /// Handles one request; @returns false when the session must end after the Ack.
  bool handle(int fd);

  asio::io_context& control_;
  std::string path_;
  WorkloadManager& manager_;
  telemetry::Readiness& readiness_;
  telemetry::MetricsRegistry& registry_;
  net::DrainScope& tasks_;
  asio::steady_timer backoff_timer_;
  std::unique_ptr<asio::posix::stream_descriptor> socket_;
  bool stopped_ = false;
};

}  // namespace meshnode::inpod
