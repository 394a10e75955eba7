#pragma once

#include <grpcpp/server.h>

#include <memory>
#include <string>

#include "base/error.hpp"
#include "fakes/test_ca.hpp"

namespace grpc {
class Service;
}  // namespace grpc

namespace meshnode::fakes {

/// A started gRPC server on 127.0.0.1:`port` (0 = any free port; `port` is set to the bound one)
/// serving `service`, with TLS for `server_name` from `ca`, or plaintext when `ca` is null.
[[nodiscard]] base::Result<std::unique_ptr<grpc::Server>> listen_loopback(const std::shared_ptr<TestCa>& ca,
                                                                          const std::string& server_name, int& port,
                                                                          grpc::Service* service);

}  // namespace meshnode::fakes
