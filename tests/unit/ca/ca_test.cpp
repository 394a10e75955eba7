// Istio CA client and certificate lifecycle, against the fake istiod CA over real gRPC + TLS.

#include <gtest/gtest.h>
#include <openssl/pem.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include "ca/certificate_manager.hpp"
#include "ca/istio_ca_client.hpp"
#include "fakes/ca_server.hpp"
#include "tls/csr.hpp"
#include "tls/local_ca.hpp"

namespace meshnode::ca {
namespace {

using namespace std::chrono_literals;
using Steady = std::chrono::steady_clock;

base::SpiffeId id(std::string sa) { return {"cluster.local", "default", std::move(sa)}; }

/// Polls `cond` every 10 ms until it holds or `within` passes (the manager has no event to wait on
/// for "a refresh happened"; its state is observable only through get()/dump()).
template <class F>
bool eventually(F cond, std::chrono::milliseconds within) {
  auto until = Steady::now() + within;
  while (Steady::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return cond();
}

/// Waits for the result of one CertificateSource / manager callback.
template <class T>
class Slot {
 public:
  auto callback() {
    return [this](T v) {
      std::lock_guard lock(mu_);
      value_.emplace(std::move(v));
      cv_.notify_all();
    };
  }
  std::optional<T> wait(std::chrono::milliseconds d = 10s) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, d, [&] { return value_.has_value(); });
    return std::move(value_);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<T> value_;
};

TEST(Csr, CarriesOnlyTheSpiffeUriSanWithAnEmptySubject) {
  auto key = tls::generate_p256_key();
  ASSERT_TRUE(key);
  auto pem = tls::make_csr_pem(id("web"), key->get());
  ASSERT_TRUE(pem) << pem.error().message();
  tls::BioPtr bio(BIO_new_mem_buf(pem->data(), static_cast<int>(pem->size())));
  std::unique_ptr<X509_REQ, base::Deleter<&X509_REQ_free>> req(
      PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  ASSERT_NE(req, nullptr);
  EXPECT_EQ(X509_NAME_entry_count(X509_REQ_get_subject_name(req.get())), 0);
  EXPECT_EQ(X509_REQ_verify(req.get(), key->get()), 1);
  EXPECT_EQ(X509_REQ_get_signature_nid(req.get()), NID_ecdsa_with_SHA256);
  STACK_OF(X509_EXTENSION)* exts = X509_REQ_get_extensions(req.get());
  ASSERT_EQ(sk_X509_EXTENSION_num(exts), 1);
  X509_EXTENSION* san = sk_X509_EXTENSION_value(exts, 0);
  EXPECT_EQ(OBJ_obj2nid(X509_EXTENSION_get_object(san)), NID_subject_alt_name);
  EXPECT_EQ(X509_EXTENSION_get_critical(san), 1);
  tls::GeneralNamesPtr names(static_cast<GENERAL_NAMES*>(X509V3_EXT_d2i(san)));
  ASSERT_EQ(sk_GENERAL_NAME_num(names.get()), 1);
  const GENERAL_NAME* n = sk_GENERAL_NAME_value(names.get(), 0);
  ASSERT_EQ(n->type, GEN_URI);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(n->d.uniformResourceIdentifier))),
            "spiffe://cluster.local/ns/default/sa/web");
  sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
}

TEST(Chain, LeafIntermediatesAndAMultiRootBundle) {
  auto ca = fakes::TestCa::create({.intermediate = true, .second_root = true});
  ASSERT_TRUE(ca);
  auto pair = (*ca)->issue(id("web"), 1h);
  ASSERT_TRUE(pair) << pair.error().message();
  auto& [issued, key] = *pair;
  ASSERT_EQ(issued.cert_chain.size(), 3u);
  auto ck = certified_key_from_chain(issued.cert_chain, std::move(key), id("web"));
  ASSERT_TRUE(ck) << ck.error().message();
  EXPECT_EQ(ck->chain.size(), 1u);
  EXPECT_EQ(ck->roots.size(), 2u) << "the last element may hold several roots";
  EXPECT_EQ(ck->serial_hex, issued.serial_hex);
}

TEST(Chain, RefusesWhatCannotBeTrusted) {
  auto ca = fakes::TestCa::create({});
  auto other = fakes::TestCa::create({});
  auto pair = (*ca)->issue(id("web"), 1h);
  ASSERT_TRUE(pair);
  auto* issued = &pair->first;
  auto* key = &pair->second;
  auto leaf_only = std::vector<std::string>{issued->cert_chain.front()};
  auto wrong_root = std::vector<std::string>{issued->cert_chain.front(), (*other)->root_pem()};
  auto other_key = tls::generate_p256_key();
  struct Case {
    std::vector<std::string> chain;
    base::SpiffeId want;
    bool own_key;
    std::string error;
  } cases[] = {
      {{}, id("web"), true, "empty certificate chain"},
      {leaf_only, id("web"), true, "has no root element"},
      {issued->cert_chain, id("db"), true,
       "CA issued spiffe://cluster.local/ns/default/sa/web when asked for"},
      {issued->cert_chain, id("web"), false, "does not match our key"},
      {wrong_root, id("web"), true, "does not verify"},
  };
  for (auto& c : cases) {
    auto k = c.own_key ? tls::private_key_from_pem(tls::to_pem(key->get()))
                       : tls::private_key_from_pem(tls::to_pem(other_key->get()));
    auto ck = certified_key_from_chain(c.chain, std::move(*k), c.want);
    ASSERT_FALSE(ck) << c.error;
    EXPECT_NE(ck.error().context.find(c.error), std::string::npos) << ck.error().context;
  }
}

class IstioCaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = fakes::TestCa::create({.intermediate = true});
    ASSERT_TRUE(ca);
    ca_ = *ca;
    auto server = fakes::FakeCaServer::start(ca_);
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
  }

  std::unique_ptr<IstioCaClient> client(std::string ttl = "2h") {
    rpc::Env env{{"CA_ADDRESS", server_->address()},
                 {"CA_ROOT_CA", ca_->root_pem()},
                 {"ALT_CA_HOSTNAME", "istiod.istio-system.svc"},
                 {"AUTH_TOKEN", "static-token"},
                 {"CLUSTER_ID", "c1"},
                 {"CA_HEADER_X_REGION", "eu"},
                 {"SECRET_TTL", ttl}};
    auto options = IstioCaOptions::from_env(env);
    EXPECT_TRUE(options && *options);
    auto c = IstioCaClient::create(std::move(**options));
    EXPECT_TRUE(c) << c.error().message();
    return std::move(*c);
  }

  std::unique_ptr<CertificateManager> manager(ManagerOptions o = {}) {
    return std::make_unique<CertificateManager>(client(), std::move(o));
  }

  std::shared_ptr<fakes::TestCa> ca_;
  std::unique_ptr<fakes::FakeCaServer> server_;
};

TEST_F(IstioCaTest, CreateCertificateSendsTheIstioRequestShape) {
  auto c = client("90m");
  Slot<Result<tls::CertifiedKey>> slot;
  c->request(id("web"), slot.callback());
  auto got = slot.wait();
  ASSERT_TRUE(got && *got) << (got ? got->error().message() : "no answer");
  EXPECT_EQ((*got)->identity, id("web"));
  EXPECT_EQ((*got)->chain.size(), 1u);
  auto calls = server_->calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].identity, "spiffe://cluster.local/ns/default/sa/web");
  EXPECT_EQ(calls[0].impersonated, "spiffe://cluster.local/ns/default/sa/web") << "shared mode";
  EXPECT_EQ(calls[0].validity_seconds, 5400);
  EXPECT_EQ(calls[0].metadata.find("authorization")->second, "Bearer static-token");
  EXPECT_EQ(calls[0].metadata.find("clusterid")->second, "c1");
  EXPECT_EQ(calls[0].metadata.find("x_region")->second, "eu");
}

TEST_F(IstioCaTest, RotatesAtHalfLifeAcrossThreeRotations) {
  server_->set_lifetime(3s);
  auto m = manager();
  Slot<Result<CertificateManager::Tls>> first;
  m->fetch(id("web"), first.callback());
  auto got = first.wait();
  ASSERT_TRUE(got && *got) << (got ? got->error().message() : "no answer");
  std::vector<std::string> serials = {(**got)->serial_hex};
  for (int rotation = 0; rotation < 3; ++rotation) {
    ASSERT_TRUE(eventually(
        [&] {
          auto now = m->get(id("web"));
          EXPECT_TRUE(now) << "a valid certificate must serve at every moment: " << now.error().message();
          return now && (*now)->serial_hex != serials.back();
        },
        5s))
        << "rotation " << rotation;
    serials.push_back((*m->get(id("web")))->serial_hex);
  }
  EXPECT_EQ(std::set<std::string>(serials.begin(), serials.end()).size(), 4u);
  auto dump = m->dump();
  ASSERT_EQ(dump.size(), 1u);
  EXPECT_EQ(dump[0].state, "Available");
  EXPECT_EQ(dump[0].chain_length, 2u);
  EXPECT_EQ(dump[0].roots, 1u);
  EXPECT_EQ(dump[0].serial_hex, serials.back());
  ::testing::Test::RecordProperty("rotation_serials",
                                  serials[0] + "," + serials[1] + "," + serials[2] + "," + serials[3]);
}

TEST_F(IstioCaTest, CaDownKeepsServingUntilExpiryThenFailsClosedThenRecovers) {
  server_->set_lifetime(3s);
  ManagerOptions o;
  o.initial_backoff = 100ms;
  o.max_backoff = 400ms;
  auto m = manager(o);
  Slot<Result<CertificateManager::Tls>> first;
  m->fetch(id("web"), first.callback());
  auto got = first.wait();
  ASSERT_TRUE(got && *got);
  const std::string serial = (**got)->serial_hex;
  const auto not_after = (**got)->not_after;
  server_->stop();

  // Renewal fails from half-life on; the same certificate keeps serving until it expires.
  ASSERT_TRUE(eventually([&] { return !m->dump().at(0).last_error.empty(); }, 5s));
  auto still = m->get(id("web"));
  if (std::chrono::system_clock::now() + 200ms < not_after) {
    ASSERT_TRUE(still) << still.error().message();
    EXPECT_EQ((*still)->serial_hex, serial);
    EXPECT_EQ(m->dump().at(0).state, "Available");
  }
  // Then it is never used again: fail closed, naming the identity.
  ASSERT_TRUE(eventually([&] { return !m->get(id("web")); }, 5s));
  auto expired = m->get(id("web"));
  EXPECT_EQ(expired.error().code, base::Errc::kCertificate);
  EXPECT_NE(
      expired.error().context.find("certificate for spiffe://cluster.local/ns/default/sa/web expired at"),
      std::string::npos)
      << expired.error().context;
  EXPECT_EQ(m->dump().at(0).state.rfind("Unavailable: ", 0), 0u) << m->dump().at(0).state;
  Slot<Result<CertificateManager::Tls>> refused;
  m->fetch(id("web"), refused.callback());
  auto r = refused.wait();
  ASSERT_TRUE(r);
  EXPECT_FALSE(*r) << "a connection waiting for an expired identity fails closed";

  // Back within one backoff step (400 ms + 20 %) plus the channel's own reconnect (<= 1 s) and
  // scheduling slack on a loaded CI machine (1 s).
  ASSERT_TRUE(server_->restart());
  auto back = Steady::now();
  ASSERT_TRUE(eventually([&] { return m->get(id("web")).has_value(); }, 3s));
  EXPECT_LT(Steady::now() - back, 480ms + 1s + 1s);
  EXPECT_NE((*m->get(id("web")))->serial_hex, serial);
}

/// A source the test completes by hand, to observe ordering and concurrency.
class ManualSource final : public CertificateSource {
 public:
  void request(const base::SpiffeId& id, Done done) override {
    std::lock_guard lock(mu_);
    pending_.emplace_back(id, std::move(done));
    cv_.notify_all();
  }
  /// Waits for the oldest outstanding request and returns its identity.
  std::optional<base::SpiffeId> next(std::chrono::milliseconds d = 5s) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, d, [&] { return pending_.size() > taken_; })) return std::nullopt;
    return pending_[taken_++].first;
  }
  /// Fails the request at `index` (in arrival order).
  void fail_at(std::size_t index) {
    Done done;
    {
      std::lock_guard lock(mu_);
      done = std::move(pending_.at(index).second);
    }
    done(base::fail(base::Errc::kCertificate, "CA said no"));
  }
  std::size_t outstanding() {
    std::lock_guard lock(mu_);
    return pending_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<base::SpiffeId, Done>> pending_;
  std::size_t taken_ = 0;
};

TEST(CertificateManager, ConnectionsGoFirstAndAtMostNAreInFlight) {
  auto source = std::make_unique<ManualSource>();
  ManualSource* s = source.get();
  ManagerOptions o;
  o.max_in_flight = 1;
  CertificateManager m(std::move(source), o);
  m.prefetch(id("a"));
  ASSERT_EQ(s->next(), id("a"));
  m.prefetch(id("warm"));
  Slot<Result<CertificateManager::Tls>> waiting;
  m.fetch(id("conn"), waiting.callback());
  EXPECT_FALSE(s->next(200ms)) << "only one request may be in flight";
  s->fail_at(0);
  EXPECT_EQ(s->next(), id("conn")) << "a waiting connection outranks a prefetch";
  s->fail_at(1);
  auto r = waiting.wait();
  ASSERT_TRUE(r);
  ASSERT_FALSE(*r);
  EXPECT_EQ(r->error().context, "no certificate for spiffe://cluster.local/ns/default/sa/conn: CA said no");
  EXPECT_EQ(s->next(), id("warm"));
}

TEST(CertificateManager, PrefetchesHboneWorkloadsOnThisNodeAndForgetsDeparted) {
  auto dir = std::filesystem::path(::testing::TempDir()) / ("mn-ca-" + std::to_string(::getpid()));
  auto local = tls::LocalCa::load_or_create(dir);
  ASSERT_TRUE(local) << local.error().message();
  ManagerOptions o;
  o.node_name = "node-a";
  CertificateManager m(std::make_unique<ProviderSource>(std::move(*local)), o);
  auto workload = [](std::string name, std::string node, state::TunnelProtocol p) {
    state::Workload w;
    w.uid = "Kubernetes//Pod/default/" + name;
    w.name = name;
    w.ns = "default";
    w.service_account = name;
    w.node = std::move(node);
    w.protocol = p;
    return w;
  };
  auto snap = state::StateSnapshot::build({workload("here", "node-a", state::TunnelProtocol::kHbone),
                                           workload("there", "node-b", state::TunnelProtocol::kHbone),
                                           workload("plain", "node-a", state::TunnelProtocol::kNone)},
                                          {}, {});
  ASSERT_TRUE(snap);
  m.update_workloads(**snap);
  ASSERT_TRUE(eventually([&] { return m.get(id("here")).has_value(); }, 5s));
  auto dump = m.dump();
  ASSERT_EQ(dump.size(), 1u);
  EXPECT_EQ(dump[0].identity, "spiffe://cluster.local/ns/default/sa/here");
  m.update_workloads(*state::StateSnapshot::empty());
  EXPECT_TRUE(m.dump().empty());
  EXPECT_FALSE(m.get(id("here")));
  std::filesystem::remove_all(dir);
}

TEST(CertificateManager, ReadersOnOtherThreadsSeeIssueAndForgetAtOnce) {
  // get() reads a published snapshot: what it returns must follow issue and forget exactly, from
  // any thread, while other threads keep reading.
  auto dir = std::filesystem::path(::testing::TempDir()) / ("mn-ca-snap-" + std::to_string(::getpid()));
  auto local = tls::LocalCa::load_or_create(dir);
  ASSERT_TRUE(local) << local.error().message();
  CertificateManager m(std::make_unique<ProviderSource>(std::move(*local)));
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::atomic<long> served{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto r = m.get(id("a"));
        if (!r) continue;
        if ((*r)->identity != id("a") || !(*r)->server_ctx || !(*r)->client_ctx) ++wrong;
        ++served;
      }
    });
  }
  for (int round = 0; round < 5; ++round) {
    m.prefetch(id("a"));
    ASSERT_TRUE(eventually([&] { return m.get(id("a")).has_value(); }, 5s)) << round;
    EXPECT_FALSE(m.get(id("b"))) << "only the identity that was issued";
    m.forget(id("a"));
    auto gone = m.get(id("a"));
    ASSERT_FALSE(gone) << "a forgotten certificate must not be served, round " << round;
    EXPECT_EQ(gone.error().context, "no certificate yet for spiffe://cluster.local/ns/default/sa/a");
  }
  stop = true;
  for (auto& r : readers) r.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(served.load(), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace meshnode::ca
