#include "inpod/zds_client.hpp"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "net/awaitable.hpp"
#include "nodeapi/zds.hpp"
#include "nodeapi/zds_socket.hpp"

namespace meshnode::inpod {
namespace {

constexpr auto kMinBackoff = std::chrono::milliseconds(10);
constexpr auto kMaxBackoff = std::chrono::seconds(15);
const std::string kConnectionTask = "zds connection";
const std::string kSnapshotTask = "zds snapshot";

}  // namespace

ZdsClient::ZdsClient(asio::io_context& control, std::string path, WorkloadManager& manager,
                     telemetry::Readiness& readiness, telemetry::MetricsRegistry& registry, net::DrainScope& tasks)
    : control_(control),
      path_(std::move(path)),
      manager_(manager),
      readiness_(readiness),
      registry_(registry),
      tasks_(tasks),
      backoff_timer_(control) {}

void ZdsClient::start() {
  readiness_.add_pending(kConnectionTask);
  readiness_.add_pending(kSnapshotTask);
  tasks_.spawn(control_.get_executor(), run(), "zds client " + path_);
}

void ZdsClient::stop() {
  stopped_ = true;
  backoff_timer_.cancel();
  std::error_code ignored;
  if (socket_) socket_->close(ignored);
}

asio::awaitable<void> ZdsClient::run() {
  std::chrono::steady_clock::duration backoff = kMinBackoff;
  bool logged_failure = false;
  while (!stopped_) {
    auto fd = nodeapi::connect_seqpacket(path_);
    if (fd) {
      backoff = kMinBackoff;
      logged_failure = false;
      co_await session(std::move(*fd));
      readiness_.add_pending(kConnectionTask);
      readiness_.add_pending(kSnapshotTask);
      if (stopped_) break;
    } else if (!logged_failure) {
      // Log the first failure of a streak only: the agent may be restarting for a while.
      spdlog::warn("zds: cannot connect to the node agent at {}: {} (retrying, pods keep serving)", path_,
                   fd.error().message());
      logged_failure = true;
    }
    backoff_timer_.expires_after(backoff);
    co_await backoff_timer_.async_wait(net::kNoThrow);
    backoff = std::min<std::chrono::steady_clock::duration>(backoff * 2, kMaxBackoff);
  }
}

asio::awaitable<void> ZdsClient::session(base::UniqueFd fd) {
  if (auto hello = nodeapi::send_hello(fd.get()); !hello) {
    spdlog::warn("zds: hello to {} failed: {}", path_, hello.error().message());
    co_return;
  }
  // The session waits for readability on the control thread: the socket must not block it.
  if (const int flags = ::fcntl(fd.get(), F_GETFL); flags < 0 || ::fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    spdlog::warn("zds: cannot make the socket to {} non-blocking: {}; reconnecting", path_, std::strerror(errno));
    co_return;
  }
  socket_ = std::make_unique<asio::posix::stream_descriptor>(control_, fd.release());
  spdlog::info("zds: connected to the node agent at {}", path_);
  readiness_.remove_pending(kConnectionTask);
  registry_.gauge("meshnode_zds_connected", "1 while connected to the node agent over ZDS").set(1);
  manager_.begin_snapshot();
  while (!stopped_) {
    auto [ec] = co_await socket_->async_wait(asio::posix::stream_descriptor::wait_read, net::kNoThrow);
    if (ec || !handle(socket_->native_handle())) break;
  }
  registry_.gauge("meshnode_zds_connected", "1 while connected to the node agent over ZDS").set(0);
  std::error_code ignored;
  socket_->close(ignored);
  socket_.reset();
}

bool ZdsClient::handle(int fd) {
  auto request = nodeapi::recv_request(fd);
  auto count = [&](const char* result) {
    registry_.counter("meshnode_zds_requests_total", "ZDS requests from the node agent by result", {{"result", result}})
        .inc();
  };
  if (!request) {
    if (nodeapi::is_would_block(request.error())) return true;
    if (request.error().code == base::Errc::kClosed) {
      spdlog::warn("zds: the node agent closed the connection; reconnecting");
      return false;
    }
    // Bad input is answered, counted, and ends the session; it never takes the proxy down.
    spdlog::error("zds: bad request from the node agent: {}; reconnecting", request.error().message());
    count("invalid");
    // Ignored: the session ends right after this Ack; if it cannot be sent the agent sees the close.
    (void)nodeapi::send_ack(fd, request.error().message());
    return false;
  }
  const auto& msg = request->message;
  base::Result<void> outcome;
  switch (msg.payload_case()) {
    case nodeapi::zds::WorkloadRequest::kAdd: {
      const auto& info = msg.add().workload_info();
      auto netns = base::Netns::from_fd(std::move(request->netns), "zds:" + msg.add().uid());
      outcome = netns ? manager_.add(msg.add().uid(), {info.name(), info.namespace_(), info.service_account()},
                                     std::move(*netns))
                      : std::unexpected(std::move(netns.error()));
      break;
    }
    case nodeapi::zds::WorkloadRequest::kKeep: manager_.keep(msg.keep().uid()); break;
    case nodeapi::zds::WorkloadRequest::kDel: manager_.del(msg.del().uid()); break;
    case nodeapi::zds::WorkloadRequest::kSnapshotSent:
      manager_.snapshot_sent();
      readiness_.remove_pending(kSnapshotTask);
      break;
    default: outcome = base::fail(base::Errc::kProtocol, "unknown ZDS request"); break;
  }
  // The Ack's wire form: an empty error string is success (Istio ZDS).
  const std::string error = outcome ? std::string() : outcome.error().message();
  spdlog::debug("zds: {} -> {}", nodeapi::describe(msg), outcome ? "ok" : error);
  count(outcome ? "ok" : "error");
  if (auto ack = nodeapi::send_ack(fd, error); !ack) {
    spdlog::warn("zds: ack failed: {}; reconnecting", ack.error().message());
    return false;
  }
  return true;
}

}  // namespace meshnode::inpod
