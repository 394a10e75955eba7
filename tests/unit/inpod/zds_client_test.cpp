// The proxy's ZDS client without root (issue 10): hello, lock-step Add/Del/SnapshotSent with one
// Ack each, readiness, and a garbage frame answered and followed by a reconnect. A real
// SOCK_SEQPACKET socket to the fake agent; the netns fds are the harness's stand-ins.
#include "inpod/zds_client.hpp"

#include "fakes/zds_server.hpp"
#include "unit/inpod/inpod_harness.hpp"

namespace meshnode::inpod::testing {
namespace {

nodeapi::zds::WorkloadInfo info(const std::string& name) {
  nodeapi::zds::WorkloadInfo i;
  i.set_name(name);
  i.set_namespace_("default");
  i.set_service_account(name);
  return i;
}

class ZdsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (h_.dir().path() / "zds.sock").string();
    auto agent = fakes::ZdsServer::start(path_);
    ASSERT_TRUE(agent) << agent.error().message();
    agent_.emplace(std::move(*agent));
    h_.on_control([&] {
      client_ = std::make_unique<ZdsClient>(h_.control(), path_, h_.manager(), h_.readiness(), h_.registry(),
                                            h_.control_tasks());
      client_->start();
    });
  }
  void TearDown() override {
    h_.on_control([&] { client_->stop(); });
    // The client's loop refers to it until it has ended (its control task): then it may go.
    EXPECT_TRUE(eventually([&] { return h_.control_tasks().active() == 0; }));
    h_.on_control([&] { client_.reset(); });
  }
  std::string ack() {
    auto a = agent_->read_ack(fakes::in(5s));
    EXPECT_TRUE(a) << a.error().message();
    return a.value_or("<no ack>");
  }

  InpodHarness h_;
  std::string path_;
  std::optional<fakes::ZdsServer> agent_;
  std::unique_ptr<ZdsClient> client_;
};

TEST_F(ZdsClientTest, SnapshotThenAddAndDelAreAckedAndDriveTheListeners) {
  ASSERT_TRUE(agent_->accept_client(fakes::in(5s)));
  ASSERT_TRUE(agent_->expect_hello(fakes::in(5s)));
  auto pod = h_.make_pod("za", 1);
  ASSERT_TRUE(agent_->add("cluster1//v1/Pod/default/za", info("za"), pod.netns->fd()));
  EXPECT_EQ(ack(), "");
  EXPECT_FALSE(h_.readiness().ready()) << "not ready before SnapshotSent";
  ASSERT_TRUE(agent_->snapshot_sent());
  EXPECT_EQ(ack(), "");
  EXPECT_TRUE(eventually([&] { return h_.readiness().ready(); })) << h_.readiness().pending().size();
  EXPECT_TRUE(eventually([&] { return listening(h_.sockets().bound({pod.ip, 15008})); }));

  ASSERT_TRUE(agent_->del("cluster1//v1/Pod/default/za"));
  EXPECT_EQ(ack(), "");
  EXPECT_TRUE(eventually([&] { return !listening(h_.sockets().bound({pod.ip, 15008})); }));
  EXPECT_EQ(h_.registry().counter("meshnode_zds_requests_total", "", {{"result", "ok"}}).value(), 3u);
}

TEST_F(ZdsClientTest, AGarbageFrameIsAnsweredCountedAndTheClientReconnects) {
  ASSERT_TRUE(agent_->accept_client(fakes::in(5s)));
  ASSERT_TRUE(agent_->expect_hello(fakes::in(5s)));
  ASSERT_TRUE(agent_->send_raw("\xff\xff not protobuf"));
  const std::string error = ack();
  EXPECT_FALSE(error.empty()) << "a bad frame gets Ack{error}";
  EXPECT_EQ(h_.registry().counter("meshnode_zds_requests_total", "", {{"result", "invalid"}}).value(), 1u);
  ASSERT_TRUE(agent_->accept_client(fakes::in(5s))) << "the proxy re-makes the connection";
  ASSERT_TRUE(agent_->expect_hello(fakes::in(5s)));
  ASSERT_TRUE(agent_->snapshot_sent());
  EXPECT_EQ(ack(), "");
}

}  // namespace
}  // namespace meshnode::inpod::testing
