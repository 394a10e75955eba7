#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "discovery.pb.h"
#include "fakes/test_ca.hpp"

namespace meshnode::fakes {

/// One request the fake received, with the stream it came on.
struct RecordedRequest {
  int stream = 0;  ///< 1-based stream number (reconnects count up)
  envoy::service::discovery::v3::DeltaDiscoveryRequest request;

  [[nodiscard]] bool is_ack() const {
    return !request.response_nonce().empty() && !request.has_error_detail();
  }
  [[nodiscard]] bool is_nack() const {
    return !request.response_nonce().empty() && request.has_error_detail();
  }
};

/// A programmable Delta ADS server (istiod's side of research §2.3) over real gRPC, with TLS from
/// a TestCa. It holds resources per type URL and behaves like istiod's delta xDS: on each new
/// stream and type it answers the initial request with every held resource whose version differs
/// from initial_resource_versions, and removes names the client holds that it does not; wildcard
/// unless the client subscribed to "*" and unsubscribed it (on-demand), then only the names
/// subscribed (found by name or alias; unknown names come back in removed_resources). Tests
/// put/remove resources (each call pushes one response to every open stream), record every
/// request, and stop/restart the server on the same port. Thread-safe.
class FakeXdsServer {
 public:
  /// Starts on 127.0.0.1 (a free port) with a TLS certificate for `server_name` from `ca`
  /// (plaintext when `ca` is null).
  [[nodiscard]] static base::Result<std::unique_ptr<FakeXdsServer>> start(
      std::shared_ptr<TestCa> ca, std::string server_name = "istiod.istio-system.svc",
      std::string host = "127.0.0.1", int port = 0);
  ~FakeXdsServer();

  /// "https://127.0.0.1:<port>" (or http:// when plaintext).
  [[nodiscard]] std::string address() const;

  /// Stores `resource` (name, version, aliases, payload) for `type_url` and pushes it to every open
  /// stream that subscribes to it, as one response. @returns the nonces sent ("" per stream skipped).
  std::vector<std::string> put(const std::string& type_url, envoy::service::discovery::v3::Resource resource);
  /// Pushes several resources and removals in one response (one nonce per stream).
  std::vector<std::string> push(const std::string& type_url,
                                std::vector<envoy::service::discovery::v3::Resource> resources,
                                std::vector<std::string> removed = {});
  /// Removes names and pushes one response with them in removed_resources.
  std::vector<std::string> remove(const std::string& type_url, std::vector<std::string> names);

  /// Waits until some recorded request satisfies `pred`; returns it. Errc::kTimeout otherwise.
  [[nodiscard]] base::Result<RecordedRequest> wait_for(
      const std::function<bool(const RecordedRequest&)>& pred,
      std::chrono::steady_clock::time_point deadline);
  /// Waits for the ACK or NACK of `nonce`.
  [[nodiscard]] base::Result<RecordedRequest> wait_reply(const std::string& nonce,
                                                         std::chrono::steady_clock::time_point deadline);
  /// Every request so far, in arrival order.
  [[nodiscard]] std::vector<RecordedRequest> requests() const;
  /// Metadata (lower-case keys) of the most recent stream.
  [[nodiscard]] std::multimap<std::string, std::string> last_metadata() const;
  /// Streams opened so far.
  [[nodiscard]] int streams() const;
  /// Waits until `n` streams have been opened.
  [[nodiscard]] base::Result<void> wait_streams(int n, std::chrono::steady_clock::time_point deadline);

  /// Shuts the server down (open streams end with UNAVAILABLE); resources are kept.
  void stop();
  /// Starts again on the same port.
  [[nodiscard]] base::Result<void> restart();

  struct Impl;

 private:
  explicit FakeXdsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::fakes
