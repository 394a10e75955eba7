#include "fakes/grpc_listen.hpp"

#include <grpcpp/grpcpp.h>

namespace meshnode::fakes {

base::Result<std::unique_ptr<grpc::Server>> listen_loopback(const std::shared_ptr<TestCa>& ca,
                                                            const std::string& server_name, int& port,
                                                            grpc::Service* service) {
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (ca) {
    auto cert = ca->server_certificate(server_name);
    if (!cert) return std::unexpected(cert.error());
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back({cert->second, cert->first});
    creds = grpc::SslServerCredentials(options);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  int wanted = port;
  builder.AddListeningPort("127.0.0.1:" + std::to_string(wanted), creds, &port);
  builder.RegisterService(service);
  auto server = builder.BuildAndStart();
  if (!server || port == 0) {
    return base::fail(base::Errc::kIo, "fake gRPC server cannot listen on 127.0.0.1:" + std::to_string(wanted));
  }
  return server;
}

}  // namespace meshnode::fakes
