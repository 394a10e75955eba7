#pragma once

#include <grpcpp/impl/codegen/service_type.h>
#include <grpcpp/server.h>
#include <grpcpp/server_context.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "base/error.hpp"
#include "fakes/test_ca.hpp"

namespace meshnode::fakes {

/// A gRPC server on 127.0.0.1 that a fake control plane stops and starts again on the same port
/// ("istiod restarts"). TLS with a certificate for `server_name` from `ca`, plaintext when `ca` is
/// null. The service object is made anew for every start: a grpc::Service registers with one server.
/// Not thread-safe: the owning fake serialises start/stop.
class LoopbackServer {
 public:
  using ServiceFactory = std::function<std::unique_ptr<grpc::Service>()>;

  LoopbackServer(std::shared_ptr<TestCa> ca, std::string server_name, ServiceFactory make_service);
  /// stop().
  ~LoopbackServer();

  /// Where start() listens: `host` (an IP) and `port` (0 = a free one, then kept). Before start().
  void listen_on(std::string host, int port) {
    host_ = std::move(host);
    port_ = port;
  }
  /// Listens: on a free port the first time, on the same port afterwards. Errc::kIo if it cannot.
  [[nodiscard]] base::Result<void> start();
  /// Shuts down at once: open calls end with UNAVAILABLE; waits for the handlers to return.
  void stop();

  /// "https://<host>:<port>" (http:// when plaintext).
  [[nodiscard]] std::string address() const;

 private:
  std::shared_ptr<TestCa> ca_;
  std::string server_name_;
  ServiceFactory make_service_;
  std::string host_ = "127.0.0.1";
  int port_ = 0;
  std::unique_ptr<grpc::Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

/// The call's metadata with lower-case keys, as copies (gRPC hands out views into the call).
[[nodiscard]] std::multimap<std::string, std::string> client_metadata(const grpc::ServerContext& context);

}  // namespace meshnode::fakes
