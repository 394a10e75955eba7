#include "ca/istio_ca_client.hpp"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <set>

#include "ca.grpc.pb.h"
#include "rpc/channel.hpp"
#include "rpc/loop.hpp"
#include "tls/csr.hpp"

namespace meshnode::ca {
namespace {

using base::Errc;
using base::fail;
namespace pb = istio::v1::auth;

Result<std::vector<tls::X509Ptr>> parse_element(const std::string& pem, std::size_t index) {
  auto certs = tls::certificates_from_pem(pem);
  if (!certs) {
    return fail(Errc::kCertificate, "cert_chain[" + std::to_string(index) + "]: " + certs.error().context);
  }
  return certs;
}

}  // namespace

CertificateSource::~CertificateSource() = default;

Result<std::optional<IstioCaOptions>> IstioCaOptions::from_env(const rpc::Env& env) {
  auto endpoint = rpc::endpoint_from_env(env, "CA");
  if (!endpoint) return std::unexpected(endpoint.error());
  if (!*endpoint) return std::optional<IstioCaOptions>{};
  IstioCaOptions o;
  o.endpoint = std::move(**endpoint);
  if (auto it = env.find("SECRET_TTL"); it != env.end() && !it->second.empty()) {
    auto ttl = rpc::parse_duration(it->second);
    if (!ttl) return fail(Errc::kConfig, "SECRET_TTL: " + ttl.error().context);
    o.ttl = std::chrono::duration_cast<std::chrono::seconds>(*ttl);
  }
  auto mode = env.find("PROXY_MODE");
  o.shared_mode = mode == env.end() || mode->second != "dedicated";
  return std::optional<IstioCaOptions>(std::move(o));
}

Result<tls::CertifiedKey> certified_key_from_chain(const std::vector<std::string>& chain, tls::EvpPkeyPtr key,
                                                   const base::SpiffeId& requested) {
  const std::string who = requested.to_string();
  if (chain.empty()) return fail(Errc::kCertificate, "CA returned an empty certificate chain for " + who);
  if (chain.size() < 2) return fail(Errc::kCertificate, "CA chain for " + who + " has no root element");
  tls::CertifiedKey ck;
  auto leaf = parse_element(chain.front(), 0);
  if (!leaf) return std::unexpected(leaf.error());
  ck.leaf = std::move(leaf->front());
  for (std::size_t i = 1; i + 1 < chain.size(); ++i) {
    auto certs = parse_element(chain[i], i);
    if (!certs) return std::unexpected(certs.error());
    for (auto& c : *certs) ck.chain.push_back(std::move(c));
  }
  auto roots = parse_element(chain.back(), chain.size() - 1);
  if (!roots) return std::unexpected(roots.error());
  ck.roots = std::move(*roots);
  if (X509_check_private_key(ck.leaf.get(), key.get()) != 1) {
    return tls::fail_ossl(Errc::kCertificate, "CA leaf for " + who + " does not match our key");
  }
  ck.key = std::move(key);
  if (auto ok = tls::fill_leaf_metadata(ck); !ok) return std::unexpected(ok.error());
  if (ck.identity != requested) {
    return fail(Errc::kCertificate, "CA issued " + ck.identity.to_string() + " when asked for " + who);
  }
  tls::X509StorePtr store(X509_STORE_new());
  tls::X509StackPtr untrusted(sk_X509_new_null());
  tls::X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  if (!store || !untrusted || !ctx) return tls::fail_ossl(Errc::kCertificate, "X509 store");
  for (const auto& r : ck.roots) X509_STORE_add_cert(store.get(), r.get());
  for (const auto& c : ck.chain) sk_X509_push(untrusted.get(), tls::share(c.get()).release());
  if (X509_STORE_CTX_init(ctx.get(), store.get(), ck.leaf.get(), untrusted.get()) != 1) {
    return tls::fail_ossl(Errc::kCertificate, "X509_STORE_CTX_init");
  }
  if (X509_verify_cert(ctx.get()) != 1) {
    return fail(Errc::kCertificate, "CA chain for " + who + " does not verify: " +
                                        X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
  }
  return ck;
}

struct IstioCaClient::Impl {
  struct Call {
    grpc::ClientContext context;
    pb::IstioCertificateResponse response;
    grpc::Status status;
    std::unique_ptr<grpc::ClientAsyncResponseReader<pb::IstioCertificateResponse>> reader;
    tls::EvpPkeyPtr key;
    base::SpiffeId id;
    Done done;
  };

  IstioCaOptions options;
  std::unique_ptr<pb::IstioCertificateService::Stub> stub;
  bool stopping = false;                      // loop thread
  std::set<std::shared_ptr<Call>> in_flight;  // loop thread
  rpc::CompletionLoop loop{"istio-ca"};       // last: stops before the rest is destroyed

  void start(const std::shared_ptr<Call>& call, pb::IstioCertificateRequest request);
  void finished(const std::shared_ptr<Call>& call);
};

void IstioCaClient::Impl::start(const std::shared_ptr<Call>& call, pb::IstioCertificateRequest request) {
  if (stopping) return call->done(fail(Errc::kCertificate, "Istio CA client stopped"));
  call->context.set_deadline(std::chrono::system_clock::now() + options.call_timeout);
  if (auto md = rpc::add_metadata(call->context, options.endpoint); !md) {
    return call->done(
        fail(Errc::kCertificate, "CA request for " + call->id.to_string() + ": " + md.error().context));
  }
  in_flight.insert(call);
  call->reader = stub->PrepareAsyncCreateCertificate(&call->context, request, loop.cq());
  call->reader->StartCall();
  call->reader->Finish(&call->response, &call->status, loop.tag([this, call](bool) { finished(call); }));
}

void IstioCaClient::Impl::finished(const std::shared_ptr<Call>& call) {
  in_flight.erase(call);
  const std::string who = call->id.to_string();
  if (!call->status.ok()) {
    return call->done(fail(Errc::kCertificate,
                           "CA CreateCertificate for " + who +
                               " failed: " + std::to_string(static_cast<int>(call->status.error_code())) +
                               " " + call->status.error_message()));
  }
  std::vector<std::string> chain(call->response.cert_chain().begin(), call->response.cert_chain().end());
  call->done(certified_key_from_chain(chain, std::move(call->key), call->id));
}

IstioCaClient::IstioCaClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

IstioCaClient::~IstioCaClient() {
  Impl* impl = impl_.get();
  impl->loop.run_sync([impl] {
    impl->stopping = true;
    for (const auto& call : impl->in_flight) call->context.TryCancel();
  });
  impl->loop.stop();
}

Result<std::unique_ptr<IstioCaClient>> IstioCaClient::create(IstioCaOptions options) {
  auto channel = rpc::make_channel(options.endpoint);
  if (!channel) return std::unexpected(channel.error());
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->stub = pb::IstioCertificateService::NewStub(*channel);
  return std::unique_ptr<IstioCaClient>(new IstioCaClient(std::move(impl)));
}

void IstioCaClient::request(const base::SpiffeId& id, Done done) {
  auto key = tls::generate_p256_key();
  if (!key) return done(std::unexpected(key.error()));
  auto csr = tls::make_csr_pem(id, key->get());
  if (!csr) return done(std::unexpected(csr.error()));
  pb::IstioCertificateRequest request;
  request.set_csr(std::move(*csr));
  request.set_validity_duration(impl_->options.ttl.count());
  if (impl_->options.shared_mode) {
    (*request.mutable_metadata()->mutable_fields())["ImpersonatedIdentity"].set_string_value(id.to_string());
  }
  auto call = std::make_shared<Impl::Call>();
  call->key = std::move(*key);
  call->id = id;
  call->done = std::move(done);
  Impl* impl = impl_.get();
  impl->loop.post(
      [impl, call, request = std::move(request)]() mutable { impl->start(call, std::move(request)); });
}

}  // namespace meshnode::ca
