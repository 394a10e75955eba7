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

  explicit Impl(std::shared_ptr<TestCa> c, std::string server_name)
      : ca(std::move(c)),
        server(ca, std::move(server_name), [this] { return std::make_unique<Service>(this); }) {}

  std::shared_ptr<TestCa> ca;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::optional<std::chrono::seconds> lifetime;
  bool failing = false;
  std::vector<RecordedCsr> calls;

  grpc::Status create(grpc::ServerContext& context, const pb::IstioCertificateRequest& request,
                      pb::IstioCertificateResponse& response) {
    RecordedCsr rec;
    rec.validity_seconds = request.validity_duration();
    rec.metadata = client_metadata(context);
    if (auto it = request.metadata().fields().find("ImpersonatedIdentity");
        it != request.metadata().fields().end()) {
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
      return finish(
          grpc::Status(grpc::StatusCode::PERMISSION_DENIED, "ImpersonatedIdentity does not match the CSR"));
    }
    rec.serial_hex = issued->serial_hex;
    for (auto& pem : issued->cert_chain) response.add_cert_chain(std::move(pem));
    return finish(grpc::Status::OK);
  }

  // Last: stopped (handlers joined) before the state above is destroyed.
  LoopbackServer server;
};

FakeCaServer::FakeCaServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeCaServer::~FakeCaServer() = default;

base::Result<std::unique_ptr<FakeCaServer>> FakeCaServer::start(std::shared_ptr<TestCa> ca,
                                                                std::string server_name, std::string host, int port) {
  auto impl = std::make_unique<Impl>(std::move(ca), std::move(server_name));
  impl->server.listen_on(std::move(host), port);
  if (auto ok = impl->server.start(); !ok) return std::unexpected(ok.error());
  return std::unique_ptr<FakeCaServer>(new FakeCaServer(std::move(impl)));
}

std::string FakeCaServer::address() const { return impl_->server.address(); }

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
    return base::fail(base::Errc::kTimeout, "fake CA: " + std::to_string(impl_->calls.size()) +
                                                " calls, wanted " + std::to_string(n));
  }
  return {};
}

void FakeCaServer::stop() { impl_->server.stop(); }

base::Result<void> FakeCaServer::restart() { return impl_->server.start(); }

}  // namespace meshnode::fakes
