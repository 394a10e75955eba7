#include "fakes/ca_server.hpp"

#include <grpcpp/grpcpp.h>

#include <condition_variable>

#include "ca.grpc.pb.h"
#include "fakes/grpc_listen.hpp"

namespace meshnode::fakes {
namespace {
namespace pb = istio::v1::auth;
}  // namespace

struct FakeCaServer::Impl {
  struct Service final : pb::IstioCertificateService::Service {
    explicit Service(Impl* i) : impl(i) {}
    grpc::Status CreateCertificate(grpc::ServerContext* context, const pb::IstioCertificateRequest* request,
                                   pb::IstioCertificateResponse* response) override {
      return impl->create(*context, *request, *response);
    }
    Impl* impl;
  };

  std::shared_ptr<TestCa> ca;
  std::string server_name;
  int port = 0;
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::optional<std::chrono::seconds> lifetime;
  bool failing = false;
  std::vector<RecordedCsr> calls;

  grpc::Status create(grpc::ServerContext& context, const pb::IstioCertificateRequest& request,
                      pb::IstioCertificateResponse& response) {
    RecordedCsr rec;
    rec.validity_seconds = request.validity_duration();
    for (const auto& [k, v] : context.client_metadata()) rec.metadata.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
    if (auto it = request.metadata().fields().find("ImpersonatedIdentity"); it != request.metadata().fields().end()) {
      rec.impersonated = it->second.string_value();
    }
    std::unique_lock lock(mu);
    auto finish = [&](grpc::Status status) {
      calls.push_back(std::move(rec));
      cv.notify_all();
      return status;
    };
    if (failing) return finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake CA: failing on purpose"));
    auto ttl = lifetime.value_or(std::chrono::seconds(request.validity_duration()));
    lock.unlock();
    auto issued = ca->sign_csr(request.csr(), ttl);
    lock.lock();
    if (!issued) return finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, issued.error().message()));
    rec.identity = issued->identity;
    if (!rec.impersonated.empty() && rec.impersonated != issued->identity) {
      return finish(grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "ImpersonatedIdentity does not match the CSR"));
    }
    rec.serial_hex = issued->serial_hex;
    for (auto& pem : issued->cert_chain) response.add_cert_chain(std::move(pem));
    return finish(grpc::Status::OK);
  }

  base::Result<void> listen(int wanted) {
    port = wanted;
    service = std::make_unique<Service>(this);
    auto started = listen_loopback(ca, server_name, port, service.get());
    if (!started) return std::unexpected(started.error());
    server = std::move(*started);
    return {};
  }
};

FakeCaServer::FakeCaServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeCaServer::~FakeCaServer() { stop(); }

base::Result<std::unique_ptr<FakeCaServer>> FakeCaServer::start(std::shared_ptr<TestCa> ca, std::string server_name) {
  auto impl = std::make_unique<Impl>();
  impl->ca = std::move(ca);
  impl->server_name = std::move(server_name);
  if (auto ok = impl->listen(0); !ok) return std::unexpected(ok.error());
  return std::unique_ptr<FakeCaServer>(new FakeCaServer(std::move(impl)));
}

std::string FakeCaServer::address() const { return "https://127.0.0.1:" + std::to_string(impl_->port); }

void FakeCaServer::set_lifetime(std::optional<std::chrono::seconds> lifetime) {
  std::lock_guard lock(impl_->mu);
  impl_->lifetime = lifetime;
}

void FakeCaServer::set_failing(bool failing) {
  std::lock_guard lock(impl_->mu);
  impl_->failing = failing;
}

std::vector<RecordedCsr> FakeCaServer::calls() const {
  std::lock_guard lock(impl_->mu);
  return impl_->calls;
}

base::Result<void> FakeCaServer::wait_calls(std::size_t n, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(impl_->mu);
  if (!impl_->cv.wait_until(lock, deadline, [&] { return impl_->calls.size() >= n; })) {
    return base::fail(base::Errc::kTimeout, "fake CA: " + std::to_string(impl_->calls.size()) + " calls, wanted " +
                                                std::to_string(n));
  }
  return {};
}

void FakeCaServer::stop() {
  if (!impl_->server) return;
  impl_->server->Shutdown(std::chrono::system_clock::now());
  impl_->server->Wait();
  impl_->server.reset();
}

base::Result<void> FakeCaServer::restart() {
  stop();
  return impl_->listen(impl_->port);
}

}  // namespace meshnode::fakes
