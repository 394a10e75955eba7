#include "fakes/grpc_listen.hpp"

#include <grpcpp/grpcpp.h>

namespace meshnode::fakes {

LoopbackServer::LoopbackServer(std::shared_ptr<TestCa> ca, std::string server_name,
                               ServiceFactory make_service)
    : ca_(std::move(ca)), server_name_(std::move(server_name)), make_service_(std::move(make_service)) {}

LoopbackServer::~LoopbackServer() { stop(); }

base::Result<void> LoopbackServer::start() {
  stop();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> creds;
  if (ca_) {
    auto cert = ca_->server_certificate(server_name_);
    if (!cert) return std::unexpected(cert.error());
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back({cert->second, cert->first});
    creds = grpc::SslServerCredentials(options);
  } else {
    creds = grpc::InsecureServerCredentials();
  }
  int wanted = port_;
  service_ = make_service_();
  builder.AddListeningPort(host_ + ":" + std::to_string(wanted), creds, &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    port_ = wanted;
    return base::fail(base::Errc::kIo,
                      "fake gRPC server cannot listen on " + host_ + ":" + std::to_string(wanted));
  }
  return {};
}

void LoopbackServer::stop() {
  if (!server_) return;
  server_->Shutdown(std::chrono::system_clock::now());
  server_->Wait();
  server_.reset();
}

std::string LoopbackServer::address() const {
  return std::string(ca_ ? "https://" : "http://") + host_ + ":" + std::to_string(port_);
}

std::multimap<std::string, std::string> client_metadata(const grpc::ServerContext& context) {
  std::multimap<std::string, std::string> out;
  for (const auto& [k, v] : context.client_metadata()) {
    out.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
  }
  return out;
}

}  // namespace meshnode::fakes
