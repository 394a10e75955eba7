// The Delta ADS client against the fake istiod over real gRPC + TLS on loopback.

#include "xds/client.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>

#include "fakes/xds_server.hpp"
#include "unit/xds/resources.hpp"

namespace meshnode::xds {
namespace {

using namespace std::chrono_literals;
using namespace test;
using fakes::RecordedRequest;

std::chrono::steady_clock::time_point in(std::chrono::milliseconds d) {
  return std::chrono::steady_clock::now() + d;
}

/// Collects what the client reports, for waits with a deadline.
class Sink : public XdsMetrics {
 public:
  XdsCallbacks callbacks() {
    return {.post = {},
            .on_snapshot =
                [this](SnapshotPtr s) {
                  update([&] {
                    latest_ = std::move(s);
                    ++snapshots_;
                  });
                },
            .on_ready = [this] { update([&] { ready_ = true; }); }};
  }
  void connection_terminated(std::string_view reason) override {
    update([&] { terminations_.emplace_back(reason); });
  }
  void message_received(std::string_view type_url, std::size_t bytes) override {
    update([&] {
      messages_[std::string(type_url)] += 1;
      bytes_ += bytes;
    });
  }
  /// Waits until `pred(latest snapshot)` holds.
  bool wait_snapshot(const std::function<bool(const state::StateSnapshot&)>& pred,
                     std::chrono::milliseconds d = 5s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, d, [&] { return latest_ && pred(*latest_); });
  }
  bool wait_ready(std::chrono::milliseconds d = 5s) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, d, [&] { return ready_; });
  }
  SnapshotPtr latest() {
    std::lock_guard lock(mu_);
    return latest_;
  }
  int snapshots() {
    std::lock_guard lock(mu_);
    return snapshots_;
  }
  std::vector<std::string> terminations() {
    std::lock_guard lock(mu_);
    return terminations_;
  }
  int messages(std::string_view type) {
    std::lock_guard lock(mu_);
    return messages_[std::string(type)];
  }

 private:
  template <class F>
  void update(F f) {
    std::lock_guard lock(mu_);
    f();
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  SnapshotPtr latest_;
  int snapshots_ = 0;
  bool ready_ = false;
  std::vector<std::string> terminations_;
  std::map<std::string, int> messages_;
  std::size_t bytes_ = 0;
};

envoy::service::discovery::v3::Resource resource(const istio::workload::Workload& w,
                                                 std::string version = "1") {
  envoy::service::discovery::v3::DeltaDiscoveryResponse r;
  add(r, w, std::move(version));
  auto out = r.resources(0);
  out.add_aliases(w.network() + "/" + base::IpAddr::from_bytes(w.addresses(0))->to_string());
  return out;
}

envoy::service::discovery::v3::Resource resource(const istio::security::Authorization& a) {
  envoy::service::discovery::v3::DeltaDiscoveryResponse r;
  add(r, a);
  return r.resources(0);
}

bool initial_request_for(const RecordedRequest& r, std::string_view type, int stream) {
  return r.stream == stream && r.request.type_url() == type && r.request.response_nonce().empty() &&
         r.request.has_node();
}

class XdsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = fakes::TestCa::create({});
    ASSERT_TRUE(ca) << ca.error().message();
    ca_ = *ca;
    auto server = fakes::FakeXdsServer::start(ca_);
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
    token_path_ = ::testing::TempDir() + "xds-token-" + std::to_string(::getpid());
    std::ofstream(token_path_) << "token-one\n";
  }
  void TearDown() override {
    if (client_) client_->stop();
    std::remove(token_path_.c_str());
  }

  rpc::Env env(bool on_demand = false) {
    return {{"XDS_ADDRESS", server_->address()},
            {"XDS_ROOT_CA", ca_->root_pem()},
            {"ALT_XDS_HOSTNAME", "istiod.istio-system.svc"},
            {"AUTH_TOKEN", token_path_},
            {"CLUSTER_ID", "cluster-7"},
            {"XDS_HEADER_X_TENANT", "blue"},
            {"INSTANCE_IP", "10.244.0.3"},
            {"POD_NAME", "meshnode-abcde"},
            {"POD_NAMESPACE", "istio-system"},
            {"NODE_NAME", "node-a"},
            {"ISTIO_META_ISTIO_VERSION", "1.24.0"},
            {"ISTIO_METAJSON_LABELS", R"({"app":"ztunnel"})"},
            {"XDS_ON_DEMAND", on_demand ? "true" : "false"}};
  }

  void start(bool on_demand = false, config::LocalConfig local = {}) {
    auto options = XdsOptions::from_env(env(on_demand));
    ASSERT_TRUE(options && *options) << (options ? "unset" : options.error().message());
    (*options)->max_backoff = 200ms;  // keeps reconnect tests short; the default is 15 s
    auto client = XdsClient::create(std::move(**options), std::move(local), sink_.callbacks(), &sink_);
    ASSERT_TRUE(client) << client.error().message();
    client_ = std::move(*client);
    client_->start();
  }

  std::shared_ptr<fakes::TestCa> ca_;
  std::unique_ptr<fakes::FakeXdsServer> server_;
  std::string token_path_;
  Sink sink_;
  std::unique_ptr<XdsClient> client_;
};

TEST_F(XdsClientTest, SendsNodeAndMetadataAndBecomesReadyAfterBothTypes) {
  server_->put(std::string(kAddressType), resource(pod("default", "web-1", "10.0.0.5")));
  start();
  ASSERT_TRUE(sink_.wait_ready());
  ASSERT_TRUE(sink_.wait_snapshot(
      [](const auto& s) { return s.workload_by_uid("Kubernetes//Pod/default/web-1") != nullptr; }));

  auto initial = server_->wait_for(
      [](const RecordedRequest& r) { return initial_request_for(r, kAddressType, 1); }, in(5s));
  ASSERT_TRUE(initial) << initial.error().message();
  const auto& node = initial->request.node();
  EXPECT_EQ(node.id(), "ztunnel~10.244.0.3~meshnode-abcde.istio-system~istio-system.svc.cluster.local");
  const auto& meta = node.metadata().fields();
  EXPECT_EQ(meta.at("NODE_NAME").string_value(), "node-a");
  EXPECT_EQ(meta.at("NAMESPACE").string_value(), "istio-system");
  EXPECT_EQ(meta.at("INSTANCE_IPS").string_value(), "10.244.0.3");
  EXPECT_EQ(meta.at("ISTIO_VERSION").string_value(), "1.24.0");
  EXPECT_EQ(meta.at("LABELS").struct_value().fields().at("app").string_value(), "ztunnel");
  EXPECT_EQ(initial->request.resource_names_subscribe_size(), 0) << "wildcard";
  ASSERT_TRUE(server_->wait_for(
      [](const RecordedRequest& r) { return initial_request_for(r, kAuthorizationType, 1); }, in(5s)));

  auto md = server_->last_metadata();
  EXPECT_EQ(md.find("authorization")->second, "Bearer token-one");
  EXPECT_EQ(md.find("clusterid")->second, "cluster-7");
  EXPECT_EQ(md.find("x_tenant")->second, "blue");

  auto status = client_->status();
  EXPECT_TRUE(status.connected);
  EXPECT_TRUE(status.ready);
  EXPECT_EQ(status.types.at(0).resources, 1u);
  EXPECT_FALSE(status.types.at(0).last_ack_nonce.empty());
  EXPECT_GE(sink_.messages(kAddressType), 1);
}

TEST_F(XdsClientTest, NacksBadResourcesByNameAndAppliesTheRest) {
  start();
  ASSERT_TRUE(sink_.wait_ready());
  auto bad = pod("default", "bad", "10.0.0.9");
  bad.set_tunnel_protocol(istio::workload::LEGACY_ISTIO_MTLS);
  std::vector<envoy::service::discovery::v3::Resource> batch = {
      resource(pod("default", "a", "10.0.0.1")), resource(bad), resource(pod("default", "b", "10.0.0.2"))};
  auto nonces = server_->push(std::string(kAddressType), batch);
  ASSERT_EQ(nonces.size(), 1u);
  auto reply = server_->wait_reply(nonces[0], in(5s));
  ASSERT_TRUE(reply) << reply.error().message();
  ASSERT_TRUE(reply->is_nack());
  EXPECT_EQ(reply->request.error_detail().message(),
            "Kubernetes//Pod/default/bad: tunnel_protocol LEGACY_ISTIO_MTLS is not supported");
  ASSERT_TRUE(sink_.wait_snapshot([](const auto& s) { return s.workloads().size() == 2; }));
  EXPECT_EQ(sink_.latest()->workload_by_uid("Kubernetes//Pod/default/bad"), nullptr);
  auto status = client_->status();
  EXPECT_EQ(status.types.at(0).last_nack_nonce, nonces[0]);
  EXPECT_NE(status.types.at(0).last_nack_error.find("default/bad"), std::string::npos);

  // A later good push is ACKed in full.
  auto ok = server_->put(std::string(kAuthorizationType), resource(deny_port("default", "deny-1", 1)));
  auto ack = server_->wait_reply(ok.at(0), in(5s));
  ASSERT_TRUE(ack);
  EXPECT_TRUE(ack->is_ack());
}

TEST_F(XdsClientTest, RemovalsReachTheSnapshot) {
  server_->put(std::string(kAddressType), resource(pod("default", "gone", "10.0.0.4")));
  start();
  ASSERT_TRUE(sink_.wait_snapshot([](const auto& s) { return s.workloads().size() == 1; }));
  auto nonces = server_->remove(std::string(kAddressType), {"Kubernetes//Pod/default/gone"});
  ASSERT_TRUE(server_->wait_reply(nonces.at(0), in(5s)));
  ASSERT_TRUE(sink_.wait_snapshot([](const auto& s) { return s.workloads().empty(); }));
}

TEST_F(XdsClientTest, ReconnectsWithAcceptedVersionsAndKeepsServingMeanwhile) {
  server_->put(std::string(kAddressType), resource(pod("default", "keep", "10.0.0.1"), "v7"));
  start();
  ASSERT_TRUE(sink_.wait_ready());
  auto bad = pod("default", "rejected", "10.0.0.2");
  bad.set_addresses(0, "xx");
  auto nack = server_->put(std::string(kAddressType), resource(pod("default", "rejected", "10.0.0.2")));
  ASSERT_TRUE(server_->wait_reply(nack.at(0), in(5s)));
  // Replace "rejected" by a bad version: its earlier accepted version (1) is what we keep.
  envoy::service::discovery::v3::DeltaDiscoveryResponse tmp;
  add(tmp, bad, "2");
  auto n2 = server_->put(std::string(kAddressType), tmp.resources(0));
  auto reply = server_->wait_reply(n2.at(0), in(5s));
  ASSERT_TRUE(reply && reply->is_nack());
  int snapshots_before = sink_.snapshots();

  server_->stop();
  ASSERT_TRUE(server_->restart());
  ASSERT_TRUE(server_->wait_streams(2, in(5s)));
  auto initial = server_->wait_for(
      [](const RecordedRequest& r) { return initial_request_for(r, kAddressType, 2); }, in(5s));
  ASSERT_TRUE(initial) << initial.error().message();
  const auto& versions = initial->request.initial_resource_versions();
  ASSERT_EQ(versions.size(), 2u);
  EXPECT_EQ(versions.at("Kubernetes//Pod/default/keep"), "v7");
  EXPECT_EQ(versions.at("Kubernetes//Pod/default/rejected"), "1")
      << "the rejected version 2 must not be recorded";
  // The server resends only what changed (the bad v2, NACKed again); the snapshot still serves.
  auto renack =
      server_->wait_for([](const RecordedRequest& r) { return r.stream == 2 && r.is_nack(); }, in(5s));
  ASSERT_TRUE(renack);
  EXPECT_NE(sink_.latest()->workload_by_uid("Kubernetes//Pod/default/keep"), nullptr);
  EXPECT_GE(sink_.snapshots(), snapshots_before);
  auto t = sink_.terminations();
  ASSERT_FALSE(t.empty());
}

// A response that does not decode (here: a resource name that is not UTF-8, which protobuf
// refuses) cannot be ACKed or NACKed by nonce: the stream ends with an error naming it, counted as
// "Error", and the client reconnects while the snapshot it had keeps serving.
TEST_F(XdsClientTest, AResponseThatDoesNotDecodeEndsTheStreamAndKeepsServing) {
  server_->put(std::string(kAddressType), resource(pod("default", "keep", "10.0.0.1")));
  start();
  ASSERT_TRUE(sink_.wait_ready());
  auto bad = resource(pod("default", "bad", "10.0.0.2"));
  bad.set_name("Kubernetes//Pod/default/bad\xff");
  server_->put(std::string(kAddressType), bad);
  ASSERT_TRUE(server_->wait_streams(2, in(5s))) << "the client did not reconnect";
  auto t = sink_.terminations();
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.front(), "Error");
  EXPECT_NE(client_->status().last_error.find("does not parse"), std::string::npos)
      << client_->status().last_error;
  EXPECT_NE(sink_.latest()->workload_by_uid("Kubernetes//Pod/default/keep"), nullptr);
  EXPECT_EQ(sink_.latest()->workload_by_uid("Kubernetes//Pod/default/bad"), nullptr);
}

TEST_F(XdsClientTest, OnDemandSubscribesOnAMissAndWaitsUnderADeadline) {
  auto w = pod("default", "lazy", "10.0.0.42");
  server_->put(std::string(kAddressType), resource(w));
  start(/*on_demand=*/true);
  ASSERT_TRUE(sink_.wait_ready()) << "on-demand readiness needs only Authorization";
  auto initial = server_->wait_for(
      [](const RecordedRequest& r) { return initial_request_for(r, kAddressType, 1); }, in(5s));
  ASSERT_TRUE(initial);
  ASSERT_EQ(initial->request.resource_names_subscribe(0), "*");
  ASSERT_EQ(initial->request.resource_names_unsubscribe(0), "*");
  EXPECT_EQ(client_->status().types.at(0).resources, 0u) << "subscribed to nothing";

  std::mutex mu;
  std::condition_variable cv;
  std::vector<Result<SnapshotPtr>> results;
  auto done = [&](Result<SnapshotPtr> r) {
    std::lock_guard lock(mu);
    results.push_back(std::move(r));
    cv.notify_all();
  };
  auto wait_results = [&](std::size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 5s, [&] { return results.size() >= n; });
  };

  client_->fetch_on_demand("/10.0.0.42", in(5s), done);
  ASSERT_TRUE(wait_results(1));
  ASSERT_TRUE(results[0]) << results[0].error().message();
  EXPECT_NE((*results[0])->workload_by_address("", *base::IpAddr::parse("10.0.0.42")), nullptr);
  ASSERT_TRUE(server_->wait_for(
      [](const RecordedRequest& r) {
        return r.request.resource_names_subscribe_size() == 1 &&
               r.request.resource_names_subscribe(0) == "/10.0.0.42";
      },
      in(5s)));

  client_->fetch_on_demand("/10.0.0.99", in(5s), done);
  ASSERT_TRUE(wait_results(2));
  ASSERT_FALSE(results[1]);
  EXPECT_EQ(results[1].error().code, base::Errc::kNotFound);

  server_->stop();
  client_->fetch_on_demand("/10.0.0.77", in(300ms), done);
  ASSERT_TRUE(wait_results(3));
  ASSERT_FALSE(results[2]);
  EXPECT_EQ(results[2].error().code, base::Errc::kTimeout);
  EXPECT_NE(results[2].error().context.find("'/10.0.0.77' not answered within"), std::string::npos)
      << results[2].error().context;
}

TEST_F(XdsClientTest, LocalConfigAndXdsCombine) {
  config::LocalConfig local;
  local.workloads.push_back(local_workload("static", "10.9.0.1"));
  server_->put(std::string(kAddressType), resource(pod("default", "dynamic", "10.9.0.2")));
  start(false, std::move(local));
  EXPECT_EQ(client_->initial_snapshot()->workloads().size(), 1u);
  ASSERT_TRUE(sink_.wait_snapshot([](const auto& s) { return s.workloads().size() == 2; }));
}

TEST(XdsOptions, UnsetAddressMeansNoXds) {
  auto o = XdsOptions::from_env({});
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->has_value());
  auto bad = XdsOptions::from_env({{"XDS_ADDRESS", "ftp://x:1"}});
  ASSERT_FALSE(bad);
  auto json = XdsOptions::from_env({{"XDS_ADDRESS", "istiod:15012"}, {"ISTIO_METAJSON_X", "{nope"}});
  ASSERT_FALSE(json);
  auto plain = XdsOptions::from_env({{"XDS_ADDRESS", "istiod:15012"}});
  ASSERT_TRUE(plain && *plain);
  EXPECT_EQ((*plain)->endpoint.address, "https://istiod:15012");
  EXPECT_EQ((*plain)->node.id(), "ztunnel~1.1.1.1~.~.svc.cluster.local");
}

}  // namespace
}  // namespace meshnode::xds
