#include "fakes/xds_server.hpp"

#include <grpcpp/grpcpp.h>

#include <set>

#include "discovery.grpc.pb.h"
#include "fakes/grpc_listen.hpp"

namespace meshnode::fakes {
namespace {

using base::Errc;
using base::fail;
using base::Result;
namespace discovery = envoy::service::discovery::v3;
using Request = discovery::DeltaDiscoveryRequest;
using Response = discovery::DeltaDiscoveryResponse;

// One client stream: what it subscribed to, per type.
struct StreamState {
  int number = 0;
  grpc::ServerReaderWriter<Response, Request>* rw = nullptr;
  std::mutex write_mu;
  struct Sub {
    bool wildcard = true;
    std::set<std::string> names;
  };
  std::map<std::string, Sub> subs;  // by type URL; present once the initial request arrived
};

}  // namespace

struct FakeXdsServer::Impl {
  // A fresh gRPC service object per server instance (a service registers with one server only).
  struct Service final : discovery::AggregatedDiscoveryService::Service {
    explicit Service(Impl* i) : impl(i) {}
    grpc::Status DeltaAggregatedResources(grpc::ServerContext* context,
                                          grpc::ServerReaderWriter<Response, Request>* rw) override {
      return impl->serve(context, rw);
    }
    Impl* impl;
  };

  Impl(std::shared_ptr<TestCa> ca, std::string server_name)
      : server(std::move(ca), std::move(server_name), [this] { return std::make_unique<Service>(this); }) {}

  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::map<std::string, discovery::Resource>> resources;  // type → name → resource
  std::vector<RecordedRequest> recorded;
  std::multimap<std::string, std::string> metadata;
  std::set<std::shared_ptr<StreamState>> open;
  int stream_count = 0;
  int nonce_count = 0;
  // Last: stopped (handlers joined) before the state above is destroyed.
  LoopbackServer server;

  grpc::Status serve(grpc::ServerContext* context, grpc::ServerReaderWriter<Response, Request>* rw);
  void on_request(const std::shared_ptr<StreamState>& s, const Request& r);
  const discovery::Resource* find(const std::string& type, const std::string& key) const;
  std::string send(const std::shared_ptr<StreamState>& s, Response resp);
  std::vector<std::string> broadcast(const std::string& type, const std::vector<discovery::Resource>& changed,
                                     const std::vector<std::string>& removed);
};

const discovery::Resource* FakeXdsServer::Impl::find(const std::string& type, const std::string& key) const {
  auto t = resources.find(type);
  if (t == resources.end()) return nullptr;
  if (auto it = t->second.find(key); it != t->second.end()) return &it->second;
  for (const auto& [name, r] : t->second) {
    for (const auto& alias : r.aliases()) {
      if (alias == key) return &r;
    }
  }
  return nullptr;
}

std::string FakeXdsServer::Impl::send(const std::shared_ptr<StreamState>& s, Response resp) {
  std::string nonce = "nonce-" + std::to_string(++nonce_count);
  resp.set_nonce(nonce);
  std::lock_guard lock(s->write_mu);
  if (!s->rw->Write(resp)) return "";
  return nonce;
}

void FakeXdsServer::Impl::on_request(const std::shared_ptr<StreamState>& s, const Request& r) {
  const std::string& type = r.type_url();
  Response resp;
  resp.set_type_url(type);
  bool initial = !s->subs.contains(type);
  auto& sub = s->subs[type];
  if (initial) {
    std::set<std::string> subscribe(r.resource_names_subscribe().begin(), r.resource_names_subscribe().end());
    std::set<std::string> unsubscribe(r.resource_names_unsubscribe().begin(),
                                      r.resource_names_unsubscribe().end());
    sub.wildcard = (subscribe.empty() || subscribe.contains("*")) && !unsubscribe.contains("*");
    subscribe.erase("*");
    sub.names = subscribe;
    const auto& held = r.initial_resource_versions();
    for (const auto& [name, res] : resources[type]) {
      if (!sub.wildcard && !sub.names.contains(name)) continue;
      auto it = held.find(name);
      if (it == held.end() || it->second != res.version()) *resp.add_resources() = res;
    }
    for (const auto& [name, version] : held) {
      if (!resources[type].contains(name)) resp.add_removed_resources(name);
    }
    if (!sub.wildcard) {
      for (const auto& name : sub.names) {
        const auto* res = find(type, name);
        if (res == nullptr) {
          resp.add_removed_resources(name);
        } else if (res->name() != name && !held.contains(res->name())) {
          *resp.add_resources() = *res;
        }
      }
    }
  } else if (r.resource_names_subscribe_size() > 0) {
    for (const auto& name : r.resource_names_subscribe()) {
      sub.names.insert(name);
      if (const auto* res = find(type, name)) {
        *resp.add_resources() = *res;
      } else {
        resp.add_removed_resources(name);
      }
    }
  } else {
    return;  // an ACK/NACK
  }
  send(s, std::move(resp));
}

grpc::Status FakeXdsServer::Impl::serve(grpc::ServerContext* context,
                                        grpc::ServerReaderWriter<Response, Request>* rw) {
  auto s = std::make_shared<StreamState>();
  s->rw = rw;
  {
    std::lock_guard lock(mu);
    s->number = ++stream_count;
    metadata = client_metadata(*context);
    open.insert(s);
    cv.notify_all();
  }
  Request r;
  while (rw->Read(&r)) {
    std::lock_guard lock(mu);
    recorded.push_back({s->number, r});
    on_request(s, r);
    cv.notify_all();
  }
  std::lock_guard lock(mu);
  open.erase(s);
  return grpc::Status::OK;
}

std::vector<std::string> FakeXdsServer::Impl::broadcast(const std::string& type,
                                                        const std::vector<discovery::Resource>& changed,
                                                        const std::vector<std::string>& removed) {
  std::vector<std::string> nonces;
  for (const auto& s : open) {
    auto sub = s->subs.find(type);
    if (sub == s->subs.end()) {
      nonces.emplace_back();
      continue;
    }
    Response resp;
    resp.set_type_url(type);
    for (const auto& r : changed) {
      bool wanted = sub->second.wildcard || sub->second.names.contains(r.name());
      for (const auto& alias : r.aliases()) wanted = wanted || sub->second.names.contains(alias);
      if (wanted) *resp.add_resources() = r;
    }
    for (const auto& name : removed) resp.add_removed_resources(name);
    nonces.push_back(send(s, std::move(resp)));
  }
  return nonces;
}

FakeXdsServer::FakeXdsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FakeXdsServer::~FakeXdsServer() = default;

Result<std::unique_ptr<FakeXdsServer>> FakeXdsServer::start(std::shared_ptr<TestCa> ca,
                                                            std::string server_name, std::string host, int port) {
  auto impl = std::make_unique<Impl>(std::move(ca), std::move(server_name));
  impl->server.listen_on(std::move(host), port);
  if (auto ok = impl->server.start(); !ok) return std::unexpected(ok.error());
  return std::unique_ptr<FakeXdsServer>(new FakeXdsServer(std::move(impl)));
}

std::string FakeXdsServer::address() const { return impl_->server.address(); }

std::vector<std::string> FakeXdsServer::put(const std::string& type_url, discovery::Resource resource) {
  return push(type_url, {std::move(resource)});
}

std::vector<std::string> FakeXdsServer::push(const std::string& type_url,
                                             std::vector<discovery::Resource> changed,
                                             std::vector<std::string> removed) {
  std::lock_guard lock(impl_->mu);
  for (const auto& r : changed) impl_->resources[type_url][r.name()] = r;
  for (const auto& name : removed) impl_->resources[type_url].erase(name);
  return impl_->broadcast(type_url, changed, removed);
}

std::vector<std::string> FakeXdsServer::remove(const std::string& type_url, std::vector<std::string> names) {
  return push(type_url, {}, std::move(names));
}

Result<RecordedRequest> FakeXdsServer::wait_for(const std::function<bool(const RecordedRequest&)>& pred,
                                                std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(impl_->mu);
  for (;;) {
    for (const auto& r : impl_->recorded) {
      if (pred(r)) return r;
    }
    if (impl_->cv.wait_until(lock, deadline) == std::cv_status::timeout) {
      for (const auto& r : impl_->recorded) {
        if (pred(r)) return r;
      }
      return fail(Errc::kTimeout, "fake xDS server: no matching request before the deadline");
    }
  }
}

Result<RecordedRequest> FakeXdsServer::wait_reply(const std::string& nonce,
                                                  std::chrono::steady_clock::time_point deadline) {
  return wait_for([&](const RecordedRequest& r) { return r.request.response_nonce() == nonce; }, deadline);
}

std::vector<RecordedRequest> FakeXdsServer::requests() const {
  std::lock_guard lock(impl_->mu);
  return impl_->recorded;
}

std::multimap<std::string, std::string> FakeXdsServer::last_metadata() const {
  std::lock_guard lock(impl_->mu);
  return impl_->metadata;
}

int FakeXdsServer::streams() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stream_count;
}

Result<void> FakeXdsServer::wait_streams(int n, std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(impl_->mu);
  if (!impl_->cv.wait_until(lock, deadline, [&] { return impl_->stream_count >= n; })) {
    return fail(Errc::kTimeout, "fake xDS server: " + std::to_string(impl_->stream_count) +
                                    " streams, wanted " + std::to_string(n));
  }
  return {};
}

void FakeXdsServer::stop() { impl_->server.stop(); }

Result<void> FakeXdsServer::restart() { return impl_->server.start(); }

}  // namespace meshnode::fakes
