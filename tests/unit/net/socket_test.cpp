#include <gtest/gtest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "net/socket.hpp"

namespace meshnode::net {
namespace {

using base::SocketAddr;
using base::UniqueFd;

SocketAddr addr(std::string_view text) {
  auto a = SocketAddr::parse(text);
  EXPECT_TRUE(a) << text;
  return a.value_or(SocketAddr{});
}

// `ip` with port 0 (SocketAddr::parse rejects port 0, which only a bind may use).
SocketAddr any_port(std::string_view ip) {
  auto a = base::IpAddr::parse(ip);
  EXPECT_TRUE(a) << ip;
  return SocketAddr{a.value_or(base::IpAddr{}), 0};
}

// A blocking connect of a fresh socket to `to`; returns the connected fd.
UniqueFd connect_to(const SocketAddr& to) {
  UniqueFd fd(::socket(to.ip.is_v4() ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_TRUE(fd);
  sockaddr_storage ss{};
  socklen_t len = to_sockaddr(to, ss);
  EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len), 0) << std::strerror(errno);
  return fd;
}

// accept(2) on a non-blocking listener whose client has already completed connect(): the kernel
// queues the connection before connect() returns, so one call suffices.
UniqueFd accept_one(const UniqueFd& listener) {
  UniqueFd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_TRUE(fd) << std::strerror(errno);
  return fd;
}

int get_int(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof(v);
  EXPECT_EQ(::getsockopt(fd, level, name, &v, &len), 0) << std::strerror(errno);
  return v;
}

TEST(Socket, LoopbackAddressesAndOriginalDst) {
  auto listener = make_listener(nullptr, any_port("127.0.0.1"));
  ASSERT_TRUE(listener) << listener.error().message();
  auto bound = local_addr(listener->get());
  ASSERT_TRUE(bound);
  EXPECT_EQ(bound->ip.to_string(), "127.0.0.1");
  ASSERT_NE(bound->port, 0);

  UniqueFd client = connect_to(*bound);
  UniqueFd server = accept_one(*listener);
  auto client_local = local_addr(client.get());
  auto client_peer = peer_addr(client.get());
  auto server_local = local_addr(server.get());
  auto server_peer = peer_addr(server.get());
  ASSERT_TRUE(client_local && client_peer && server_local && server_peer);
  EXPECT_EQ(*client_peer, *bound);
  EXPECT_EQ(*server_local, *bound);
  EXPECT_EQ(*server_peer, *client_local);
  EXPECT_NE(client_local->port, bound->port);

  // No NAT on loopback: the original destination is the address the client dialled.
  auto orig = original_dst(server.get());
  ASSERT_TRUE(orig) << orig.error().message();
  EXPECT_EQ(*orig, *bound);
}

TEST(Socket, PeerAddrOfUnconnectedSocketIsAnError) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  auto peer = peer_addr(fd.get());
  ASSERT_FALSE(peer);
  EXPECT_EQ(peer.error().code, base::Errc::kIo);
  EXPECT_EQ(peer.error().cause.value(), ENOTCONN);
}

TEST(Socket, OriginalDstOfV6LoopbackConnection) {
  auto listener = make_listener(nullptr, any_port("::1"));
  if (!listener) GTEST_SKIP() << "no IPv6 loopback: " << listener.error().message();
  auto bound = local_addr(listener->get());
  ASSERT_TRUE(bound);
  EXPECT_EQ(bound->ip.to_string(), "::1");
  UniqueFd client = connect_to(*bound);
  UniqueFd server = accept_one(*listener);
  auto orig = original_dst(server.get());
  ASSERT_TRUE(orig) << orig.error().message();
  EXPECT_EQ(*orig, *bound);
}

TEST(Socket, WildcardListenerIsDualStackAndAcceptsIpv4) {
  auto listener = make_listener(nullptr, any_port("0.0.0.0"));
  ASSERT_TRUE(listener) << listener.error().message();
  auto bound = local_addr(listener->get());
  ASSERT_TRUE(bound);
  ASSERT_TRUE(bound->ip.is_unspecified());
  if (bound->ip.is_v4()) GTEST_SKIP() << "host without IPv6: listener fell back to 0.0.0.0";
  EXPECT_EQ(get_int(listener->get(), IPPROTO_IPV6, IPV6_V6ONLY), 0);

  SocketAddr v4{base::IpAddr::v4({127, 0, 0, 1}), bound->port};
  UniqueFd client = connect_to(v4);
  UniqueFd server = accept_one(*listener);
  // The peer arrives as ::ffff:127.0.0.1 and must be normalised to IPv4 for policy lookups.
  auto peer = peer_addr(server.get());
  auto local = local_addr(server.get());
  ASSERT_TRUE(peer && local);
  EXPECT_TRUE(peer->ip.is_v4());
  EXPECT_EQ(peer->ip.to_string(), "127.0.0.1");
  EXPECT_EQ(*local, v4);
  auto orig = original_dst(server.get());
  ASSERT_TRUE(orig);
  EXPECT_EQ(*orig, v4);

  SocketAddr v6{base::IpAddr::parse("::1").value(), bound->port};
  UniqueFd client6 = connect_to(v6);
  UniqueFd server6 = accept_one(*listener);
  auto peer6 = peer_addr(server6.get());
  ASSERT_TRUE(peer6);
  EXPECT_EQ(peer6->ip.to_string(), "::1");
}

TEST(Socket, ListenerIsNonBlockingAndCloseOnExec) {
  auto listener = make_listener(nullptr, any_port("127.0.0.1"));
  ASSERT_TRUE(listener);
  UniqueFd none(::accept4(listener->get(), nullptr, nullptr, 0));
  EXPECT_FALSE(none);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK);
  EXPECT_NE(::fcntl(listener->get(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST(Socket, SecondBindWithoutReusePortFailsNamingTheAddress) {
  ListenOptions exclusive;
  exclusive.reuse_port = false;
  auto first = make_listener(nullptr, any_port("127.0.0.1"), exclusive);
  ASSERT_TRUE(first) << first.error().message();
  auto bound = local_addr(first->get());
  ASSERT_TRUE(bound);

  auto second = make_listener(nullptr, *bound, exclusive);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, base::Errc::kIo);
  EXPECT_EQ(second.error().cause.value(), EADDRINUSE);
  EXPECT_NE(second.error().message().find(bound->to_string()), std::string::npos) << second.error().message();
}

TEST(Socket, ReusePortListenersShareAPort) {
  auto first = make_listener(nullptr, any_port("127.0.0.1"));
  ASSERT_TRUE(first);
  auto bound = local_addr(first->get());
  ASSERT_TRUE(bound);
  auto second = make_listener(nullptr, *bound);
  EXPECT_TRUE(second) << second.error().message();
}

bool can_set_mark() {
  UniqueFd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  std::uint32_t mark = 1;
  return ::setsockopt(probe.get(), SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) == 0;
}

TEST(Socket, ConnectSocketWithoutMarkHasNoDelay) {
  auto fd = make_connect_socket(nullptr, addr("127.0.0.1:15008"), 0);
  ASSERT_TRUE(fd) << fd.error().message();
  EXPECT_EQ(get_int(fd->get(), IPPROTO_TCP, TCP_NODELAY), 1);
  EXPECT_EQ(get_int(fd->get(), SOL_SOCKET, SO_MARK), 0);
  EXPECT_EQ(get_int(fd->get(), SOL_SOCKET, SO_DOMAIN), AF_INET);
  EXPECT_NE(::fcntl(fd->get(), F_GETFL) & O_NONBLOCK, 0);

  auto fd6 = make_connect_socket(nullptr, addr("[::1]:15008"), 0);
  ASSERT_TRUE(fd6) << fd6.error().message();
  EXPECT_EQ(get_int(fd6->get(), SOL_SOCKET, SO_DOMAIN), AF_INET6);
  EXPECT_EQ(get_int(fd6->get(), IPPROTO_TCP, TCP_NODELAY), 1);
}

TEST(Socket, ConnectSocketCarriesProxyMark) {
  auto fd = make_connect_socket(nullptr, addr("127.0.0.1:15008"), kProxyMark);
  if (!can_set_mark()) {
    // Without CAP_NET_ADMIN the mark cannot be set; the failure must be reported, not ignored.
    ASSERT_FALSE(fd);
    EXPECT_EQ(fd.error().code, base::Errc::kIo);
    EXPECT_NE(fd.error().message().find("SO_MARK"), std::string::npos) << fd.error().message();
    GTEST_SKIP() << "no CAP_NET_ADMIN: checked only that SO_MARK failure is reported";
  }
  ASSERT_TRUE(fd) << fd.error().message();
  EXPECT_EQ(static_cast<std::uint32_t>(get_int(fd->get(), SOL_SOCKET, SO_MARK)), kProxyMark);
  EXPECT_EQ(get_int(fd->get(), IPPROTO_TCP, TCP_NODELAY), 1);
}

TEST(Socket, SockaddrRoundTrip) {
  for (std::string_view text : {"10.1.2.3:80", "[fd00::1]:15008", "255.255.255.255:65535"}) {
    sockaddr_storage ss{};
    socklen_t len = to_sockaddr(addr(text), ss);
    EXPECT_EQ(len, ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    auto back = from_sockaddr(ss);
    ASSERT_TRUE(back);
    EXPECT_EQ(back->to_string(), text);
  }
  sockaddr_storage unix_ss{};
  unix_ss.ss_family = AF_UNIX;
  EXPECT_FALSE(from_sockaddr(unix_ss));
}

}  // namespace
}  // namespace meshnode::net
