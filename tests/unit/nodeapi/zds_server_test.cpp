#include "fakes/zds_server.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "nodeapi/zds.hpp"
#include "unit/nodeapi/test_util.hpp"

namespace meshnode::nodeapi {
namespace {

using base::Errc;
using fakes::in;
using fakes::ZdsServer;
using namespace std::chrono_literals;
using testing::inode_of;
using testing::open_own_netns;
using testing::TempSocketPath;

/// What the minimal client saw, for assertions after it stopped.
struct ClientLog {
  std::vector<std::string> requests;           // describe() of each valid request, in order
  std::vector<std::pair<dev_t, ino_t>> netns;  // inode of each Add's netns fd
  std::string stopped_by;                      // error that ended the loop
};

/// A minimal proxy-side ZDS client: hello, then answer every request with exactly one Ack; on a
/// protocol error it acks with the error and disconnects (what issue 3 asks of the proxy).
ClientLog run_client(const std::string& path) {
  ClientLog log;
  auto sock = connect_seqpacket(path);
  if (!sock) return {{}, {}, sock.error().message()};
  if (auto hello = send_hello(sock->get()); !hello) return {{}, {}, hello.error().message()};
  for (;;) {
    auto request = recv_request(sock->get());
    if (!request) {
      log.stopped_by = request.error().message();
      if (request.error().code == Errc::kProtocol) (void)send_ack(sock->get(), request.error().message());
      return log;
    }
    log.requests.push_back(describe(request->message));
    if (request->netns) log.netns.push_back(inode_of(request->netns.get()));
    if (auto ack = send_ack(sock->get(), ""); !ack) {
      log.stopped_by = ack.error().message();
      return log;
    }
  }
}

TEST(FakeZdsServer, HelloAddKeepDelSnapshotAndAcks) {
  TempSocketPath path("fake");
  auto server = ZdsServer::start(path.str());
  ASSERT_TRUE(server) << server.error().message();

  ClientLog log;
  std::thread client([&] { log = run_client(path.str()); });

  ASSERT_TRUE(server->accept_client(in(5s)));
  ASSERT_TRUE(server->expect_hello(in(5s)));

  auto netns = open_own_netns();
  zds::WorkloadInfo info;
  info.set_name("pod-a");
  info.set_namespace_("default");
  info.set_service_account("sa-a");
  ASSERT_TRUE(server->add("uid-a", info, netns.get()));
  auto ack = server->read_ack(in(5s));
  ASSERT_TRUE(ack) << ack.error().message();
  EXPECT_EQ(*ack, "");

  ASSERT_TRUE(server->keep("uid-b"));
  EXPECT_EQ(server->read_ack(in(5s)).value_or("failed"), "");
  ASSERT_TRUE(server->snapshot_sent());
  EXPECT_EQ(server->read_ack(in(5s)).value_or("failed"), "");
  ASSERT_TRUE(server->del("uid-a"));
  EXPECT_EQ(server->read_ack(in(5s)).value_or("failed"), "");

  // A malformed frame: the client NACKs naming the problem, then disconnects.
  ASSERT_TRUE(server->send_raw("\x0a\xff", netns.get()));
  auto nack = server->read_ack(in(5s));
  ASSERT_TRUE(nack) << nack.error().message();
  EXPECT_NE(nack->find("malformed WorkloadRequest"), std::string::npos) << *nack;
  ASSERT_TRUE(server->wait_client_closed(in(5s)));
  EXPECT_FALSE(server->has_client());
  client.join();

  EXPECT_EQ(log.requests,
            (std::vector<std::string>{"add uid=uid-a", "keep uid=uid-b", "snapshot_sent", "del uid=uid-a"}));
  ASSERT_EQ(log.netns.size(), 1u);
  EXPECT_EQ(log.netns[0], inode_of(netns.get()));
  EXPECT_EQ(log.stopped_by.find("protocol"), 0u) << log.stopped_by;
}

TEST(FakeZdsServer, CloseClientEndsTheClientAndAReconnectIsAccepted) {
  TempSocketPath path("reconnect");
  auto server = ZdsServer::start(path.str());
  ASSERT_TRUE(server) << server.error().message();

  for (int round = 0; round < 2; ++round) {
    ClientLog log;
    std::thread client([&] { log = run_client(path.str()); });
    ASSERT_TRUE(server->accept_client(in(5s)));
    ASSERT_TRUE(server->expect_hello(in(5s)));
    ASSERT_TRUE(server->snapshot_sent());
    EXPECT_EQ(server->read_ack(in(5s)).value_or("failed"), "");
    server->close_client();
    client.join();
    EXPECT_EQ(log.requests, std::vector<std::string>{"snapshot_sent"});
    EXPECT_EQ(log.stopped_by.find("closed"), 0u) << log.stopped_by;
  }
}

TEST(FakeZdsServer, DeadlinesAndMisuse) {
  TempSocketPath path("deadline");
  auto server = ZdsServer::start(path.str());
  ASSERT_TRUE(server) << server.error().message();

  // No client yet: accept times out, steps that need a client say so.
  const auto started = std::chrono::steady_clock::now();
  auto accepted = server->accept_client(in(50ms));
  ASSERT_FALSE(accepted);
  EXPECT_EQ(accepted.error().code, Errc::kTimeout);
  EXPECT_GE(std::chrono::steady_clock::now() - started, 50ms);
  auto keep = server->keep("u");
  ASSERT_FALSE(keep);
  EXPECT_EQ(keep.error().code, Errc::kClosed);

  // A connected client that stays silent: reading an ack times out.
  auto sock = connect_seqpacket(path.str());
  ASSERT_TRUE(sock) << sock.error().message();
  ASSERT_TRUE(server->accept_client(in(5s)));
  auto ack = server->read_ack(in(50ms));
  ASSERT_FALSE(ack);
  EXPECT_EQ(ack.error().code, Errc::kTimeout);

  // A hello with a version other than V1 (here 2) is refused.
  ASSERT_TRUE(send_packet(sock->get(), std::string("\x08\x02", 2)));
  auto expected = server->expect_hello(in(5s));
  ASSERT_FALSE(expected);
  EXPECT_EQ(expected.error().code, Errc::kProtocol);

  // A client that sends something unsolicited is caught by wait_client_closed.
  ASSERT_TRUE(send_ack(sock->get(), ""));
  auto closed = server->wait_client_closed(in(5s));
  ASSERT_FALSE(closed);
  EXPECT_EQ(closed.error().code, Errc::kProtocol);
}

TEST(FakeZdsServer, RemovesItsSocketFile) {
  TempSocketPath path("cleanup");
  {
    auto server = ZdsServer::start(path.str());
    ASSERT_TRUE(server) << server.error().message();
    ZdsServer moved = std::move(*server);
    EXPECT_TRUE(std::filesystem::exists(path.str()));
  }
  EXPECT_FALSE(std::filesystem::exists(path.str()));
}

}  // namespace
}  // namespace meshnode::nodeapi
