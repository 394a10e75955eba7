#include "nodeapi/zds_socket.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <vector>

#include "nodeapi/zds.hpp"
#include "unit/nodeapi/test_util.hpp"

namespace meshnode::nodeapi {
namespace {

using base::Errc;
using testing::inode_of;
using testing::is_cloexec;
using testing::open_fd_count;
using testing::open_own_netns;
using testing::seqpacket_pair;
using testing::TempSocketPath;

TEST(ZdsSocket, OneMessagePerPacketWithoutPrefix) {
  auto pair = seqpacket_pair();
  zds::WorkloadRequest first;
  first.mutable_keep()->set_uid("pod-a");
  zds::WorkloadRequest second;
  second.mutable_snapshot_sent();
  ASSERT_TRUE(send_message(pair.a.get(), first));
  ASSERT_TRUE(send_message(pair.a.get(), second));

  // Two packets stay two packets, each exactly the serialized message (no length prefix).
  auto got1 = recv_message(pair.b.get());
  ASSERT_TRUE(got1) << got1.error().message();
  EXPECT_EQ(got1->bytes, first.SerializeAsString());
  EXPECT_TRUE(got1->fds.empty());
  auto got2 = recv_message(pair.b.get());
  ASSERT_TRUE(got2) << got2.error().message();
  EXPECT_EQ(got2->bytes, second.SerializeAsString());
}

TEST(ZdsSocket, PassesOneNetnsFdWithCloexec) {
  auto pair = seqpacket_pair();
  auto netns = open_own_netns();
  ASSERT_TRUE(send_packet(pair.a.get(), "x", std::vector<int>{netns.get()}));

  auto got = recv_message(pair.b.get());
  ASSERT_TRUE(got) << got.error().message();
  ASSERT_EQ(got->fds.size(), 1u);
  EXPECT_NE(got->fds[0].get(), netns.get());
  EXPECT_EQ(inode_of(got->fds[0].get()), inode_of(netns.get()));
  EXPECT_TRUE(is_cloexec(got->fds[0].get()));
}

TEST(ZdsSocket, PeerCloseIsClosed) {
  auto pair = seqpacket_pair();
  pair.a.reset();
  auto got = recv_message(pair.b.get());
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().code, Errc::kClosed);
}

TEST(ZdsSocket, SendToClosedPeerIsClosedWithoutSigpipe) {
  auto pair = seqpacket_pair();
  pair.b.reset();
  zds::ZdsHello hello;
  hello.set_version(zds::V1);
  auto sent = send_message(pair.a.get(), hello);
  ASSERT_FALSE(sent);
  EXPECT_EQ(sent.error().code, Errc::kClosed);
}

TEST(ZdsSocket, NonBlockingEmptyIsWouldBlock) {
  auto pair = seqpacket_pair();
  ASSERT_EQ(::fcntl(pair.b.get(), F_SETFL, ::fcntl(pair.b.get(), F_GETFL) | O_NONBLOCK), 0);
  auto got = recv_message(pair.b.get());
  ASSERT_FALSE(got);
  EXPECT_TRUE(is_would_block(got.error())) << got.error().message();
  EXPECT_EQ(got.error().code, Errc::kIo);

  // Errors that are not EAGAIN are not "would block".
  pair.a.reset();
  auto closed = recv_message(pair.b.get());
  ASSERT_FALSE(closed);
  EXPECT_FALSE(is_would_block(closed.error()));
}

TEST(ZdsSocket, OversizedPacketIsTruncatedErrorAndClosesItsFd) {
  auto pair = seqpacket_pair();
  const auto before = open_fd_count();
  {
    auto netns = open_own_netns();
    ASSERT_TRUE(send_packet(pair.a.get(), std::string(2000, 'z'), std::vector<int>{netns.get()}));
  }
  {
    auto got = recv_message(pair.b.get(), 1024);
    ASSERT_FALSE(got);
    EXPECT_EQ(got.error().code, Errc::kProtocol);
    EXPECT_NE(got.error().context.find("packet truncated"), std::string::npos) << got.error().message();
  }
  EXPECT_EQ(open_fd_count(), before);
}

TEST(ZdsSocket, TooManyFdsIsControlTruncatedAndLeaksNothing) {
  auto pair = seqpacket_pair();
  const auto before = open_fd_count();
  {
    // 12 fds: more than recv_message makes room for. Sent by hand; send_packet refuses that many.
    constexpr int kCount = 12;
    std::vector<base::UniqueFd> owned;
    std::vector<int> raw;
    for (int i = 0; i < kCount; ++i) {
      owned.push_back(open_own_netns());
      raw.push_back(owned.back().get());
    }
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kCount)] = {};
    char byte = 'x';
    iovec iov{&byte, 1};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * kCount);
    std::memcpy(CMSG_DATA(c), raw.data(), sizeof(int) * kCount);
    ASSERT_EQ(::sendmsg(pair.a.get(), &msg, MSG_NOSIGNAL), 1);

    auto refused = send_packet(pair.a.get(), "x", raw);
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, Errc::kInvalidArgument);
  }
  {
    auto got = recv_message(pair.b.get());
    ASSERT_FALSE(got);
    EXPECT_EQ(got.error().code, Errc::kProtocol);
    EXPECT_NE(got.error().context.find("control data truncated"), std::string::npos) << got.error().message();
  }
  EXPECT_EQ(open_fd_count(), before);
}

TEST(ZdsSocket, PathSocketConnectAcceptAndExchange) {
  TempSocketPath path("path");
  auto listener = listen_seqpacket(path.str());
  ASSERT_TRUE(listener) << listener.error().message();
  auto client = connect_seqpacket(path.str());
  ASSERT_TRUE(client) << client.error().message();
  auto server = accept_seqpacket(listener->get());
  ASSERT_TRUE(server) << server.error().message();
  EXPECT_TRUE(is_cloexec(client->get()));
  EXPECT_TRUE(is_cloexec(server->get()));

  int type = 0;
  socklen_t len = sizeof(type);
  ASSERT_EQ(::getsockopt(client->get(), SOL_SOCKET, SO_TYPE, &type, &len), 0);
  EXPECT_EQ(type, SOCK_SEQPACKET);

  auto netns = open_own_netns();
  ASSERT_TRUE(send_packet(server->get(), "add", std::vector<int>{netns.get()}));
  auto got = recv_message(client->get());
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(got->bytes, "add");
  ASSERT_EQ(got->fds.size(), 1u);
  EXPECT_EQ(inode_of(got->fds[0].get()), inode_of(netns.get()));
}

TEST(ZdsSocket, ListenReplacesStaleSocketFile) {
  TempSocketPath path("stale");
  {
    auto first = listen_seqpacket(path.str());
    ASSERT_TRUE(first) << first.error().message();
  }
  // The dead listener left its socket file behind, as a crashed agent would.
  ASSERT_TRUE(std::filesystem::exists(path.str()));
  auto second = listen_seqpacket(path.str());
  ASSERT_TRUE(second) << second.error().message();
  auto client = connect_seqpacket(path.str());
  EXPECT_TRUE(client) << client.error().message();
}

TEST(ZdsSocket, AddressErrors) {
  auto too_long = connect_seqpacket("/tmp/" + std::string(200, 'a'));
  ASSERT_FALSE(too_long);
  EXPECT_EQ(too_long.error().code, Errc::kInvalidArgument);
  auto empty = listen_seqpacket("");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, Errc::kInvalidArgument);

  TempSocketPath path("absent");
  auto nobody = connect_seqpacket(path.str());
  ASSERT_FALSE(nobody);
  EXPECT_EQ(nobody.error().code, Errc::kConnectFailed);
  EXPECT_EQ(nobody.error().cause, std::errc::no_such_file_or_directory);
}

}  // namespace
}  // namespace meshnode::nodeapi
