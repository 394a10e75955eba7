#include "agent/zds_server.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include <filesystem>
#include <random>

#include "telemetry/metrics.hpp"
#include "nodeapi/zds.hpp"

namespace meshnode::agent {
namespace {

using namespace std::chrono_literals;
using base::Errc;

std::string temp_socket() {
  std::random_device rd;
  return (std::filesystem::temp_directory_path() / ("mn-zds-" + std::to_string(rd()) + ".sock")).string();
}

nodeapi::zds::WorkloadInfo info(const std::string& name) {
  nodeapi::zds::WorkloadInfo i;
  i.set_name(name);
  i.set_namespace_("ns");
  i.set_service_account("sa");
  return i;
}

// The proxy side driven by hand, step by step (blocking socket, 2 s receive timeout).
struct Proxy {
  base::UniqueFd fd;
  explicit Proxy(const std::string& path) {
    auto connected = nodeapi::connect_seqpacket(path);
    if (!connected) return;
    fd = std::move(*connected);
    timeval tv{2, 0};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)nodeapi::send_hello(fd.get());
  }
  nodeapi::Request next() {
    auto request = nodeapi::recv_request(fd.get());
    EXPECT_TRUE(request) << request.error().message();
    return request ? std::move(*request) : nodeapi::Request{};
  }
  void ack(std::string error = "") { ASSERT_TRUE(nodeapi::send_ack(fd.get(), std::move(error))); }
};

class ZdsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto netns = base::Netns::current();
    ASSERT_TRUE(netns);
    own_ = std::make_shared<const base::Netns>(std::move(*netns));
  }
  void start(std::vector<ZdsServer::SnapshotEntry> snapshot = {}) {
    snapshot_ = std::move(snapshot);
    ZdsServer::Options options{path_, 2000ms, 2000ms};
    auto server = ZdsServer::start(options, [this] { return snapshot_; }, &connected_);
    ASSERT_TRUE(server) << server.error().message();
    server_ = std::move(*server);
  }
  // The server counts a proxy once its snapshot is acked; wait for that on the server's thread.
  void wait_connections(std::size_t n) {
    for (auto deadline = std::chrono::steady_clock::now() + 2s;
         server_->connections() != n && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::sleep_for(2ms);
    }
    ASSERT_EQ(server_->connections(), n);
  }

  std::string path_ = temp_socket();
  std::shared_ptr<const base::Netns> own_;
  std::vector<ZdsServer::SnapshotEntry> snapshot_;
  telemetry::Gauge connected_;
  std::unique_ptr<ZdsServer> server_;
};

TEST_F(ZdsServerTest, NoProxyMeansAddFails) {
  start();
  auto added = server_->add("u", info("p"), *own_);
  ASSERT_FALSE(added);
  EXPECT_EQ(added.error().code, Errc::kNotFound);
  EXPECT_EQ(added.error().context, "no ztunnel connection");
}

TEST_F(ZdsServerTest, SnapshotIsAddWithFdOrKeepOneAtATimeThenSnapshotSent) {
  start({{"with-fd", info("a"), own_}, {"without-fd", info("b"), nullptr}});
  Proxy proxy(path_);
  auto first = proxy.next();
  ASSERT_TRUE(first.message.has_add());
  EXPECT_EQ(first.message.add().uid(), "with-fd");
  EXPECT_EQ(first.message.add().workload_info().name(), "a");
  struct stat st {};
  ASSERT_EQ(::fstat(first.netns.get(), &st), 0);
  EXPECT_EQ(st.st_ino, own_->ino());
  proxy.ack();
  auto second = proxy.next();
  ASSERT_TRUE(second.message.has_keep());
  EXPECT_EQ(second.message.keep().uid(), "without-fd");
  proxy.ack("failure to start proxy");  // a NACKed snapshot entry does not end the connection
  ASSERT_TRUE(proxy.next().message.has_snapshot_sent());
  proxy.ack();
  wait_connections(1);
  EXPECT_EQ(connected_.value(), 1);
  EXPECT_TRUE(server_->acked("with-fd"));
  EXPECT_FALSE(server_->acked("without-fd"));
}

TEST_F(ZdsServerTest, AddGoesToTheNewestDelToAll) {
  start();
  Proxy old_proxy(path_);
  ASSERT_TRUE(old_proxy.next().message.has_snapshot_sent());
  old_proxy.ack();
  wait_connections(1);
  Proxy new_proxy(path_);
  ASSERT_TRUE(new_proxy.next().message.has_snapshot_sent());
  new_proxy.ack();
  wait_connections(2);

  std::thread answer([&] {
    auto add = new_proxy.next();
    EXPECT_TRUE(add.message.has_add());
    EXPECT_TRUE(add.netns.valid());
    new_proxy.ack();
  });
  ASSERT_TRUE(server_->add("u1", info("p"), *own_));
  answer.join();
  EXPECT_TRUE(server_->acked("u1"));

  std::thread answer_del([&] {
    for (Proxy* p : {&old_proxy, &new_proxy}) {
      auto del = p->next();
      EXPECT_TRUE(del.message.has_del());
      EXPECT_EQ(del.message.del().uid(), "u1");
      p->ack();
    }
  });
  server_->del("u1");
  answer_del.join();
  EXPECT_FALSE(server_->acked("u1"));
  EXPECT_EQ(server_->connections(), 2u);
}

TEST_F(ZdsServerTest, NackIsAnErrorWithTheProxysReason) {
  start();
  Proxy proxy(path_);
  ASSERT_TRUE(proxy.next().message.has_snapshot_sent());
  proxy.ack();
  wait_connections(1);
  std::thread answer([&] {
    (void)proxy.next();
    proxy.ack("failure to start proxy : bind");
  });
  auto added = server_->add("u1", info("p"), *own_);
  answer.join();
  ASSERT_FALSE(added);
  EXPECT_EQ(added.error().context, "proxy rejected: failure to start proxy : bind");
  EXPECT_FALSE(server_->acked("u1"));
  EXPECT_EQ(server_->connections(), 1u) << "a NACK keeps the connection";
}

TEST_F(ZdsServerTest, DeadOrChattyProxiesAreDropped) {
  start();
  {
    Proxy proxy(path_);
    ASSERT_TRUE(proxy.next().message.has_snapshot_sent());
    proxy.ack();
    wait_connections(1);
  }  // hang up
  wait_connections(0);
  EXPECT_EQ(connected_.value(), 0);
  Proxy chatty(path_);
  ASSERT_TRUE(chatty.next().message.has_snapshot_sent());
  chatty.ack();
  wait_connections(1);
  chatty.ack();  // unsolicited: a protocol error
  wait_connections(0);
}

TEST_F(ZdsServerTest, SilentProxyTimesOutWithoutBlockingOthers) {
  start();
  Proxy silent(path_);
  ASSERT_TRUE(silent.next().message.has_snapshot_sent());
  silent.ack();
  wait_connections(1);
  auto added = server_->add("u", info("p"), *own_);  // never acked
  ASSERT_FALSE(added);
  EXPECT_EQ(added.error().code, Errc::kTimeout);
  EXPECT_EQ(server_->connections(), 0u);
}

}  // namespace
}  // namespace meshnode::agent
