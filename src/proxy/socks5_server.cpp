// Socks5 (15080): RFC 1928 negotiation, then the outbound path.
#include "proxy/socks5_server.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "net/deadline.hpp"
#include "net/socket.hpp"

namespace meshnode::proxy {
namespace socks5 {
namespace {

// Reads until `parse` reports a complete message or an error; the buffer keeps leftovers.
template <class Parse>
asio::awaitable<base::Result<std::size_t>> read_message(net::ByteStream& in, std::vector<std::byte>& buf, Parse parse) {
  for (;;) {
    auto parsed = parse(std::span<const std::byte>(buf));
    if (!parsed) co_return std::unexpected(parsed.error());
    if (parsed->value) co_return parsed->consumed;
    const std::size_t have = buf.size();
    buf.resize(std::max(parsed->need, have + 1));
    const auto free_space = std::span(buf).subspan(have);
    auto n = co_await in.read_some(free_space);
    if (!n) co_return std::unexpected(n.error());
    if (*n == 0) co_return base::fail(base::Errc::kProtocol, "socks5 client closed during negotiation");
    buf.resize(have + *n);
  }
}

// A refusal of an otherwise well-formed request, and why: nullopt when it can be carried.
std::optional<std::pair<Reply, std::string>> refusal_of(const Request& request) {
  if (request.command != 1) {
    return std::pair{Reply::kCommandNotSupported,
                     "socks5 command " + std::to_string(request.command) + " is not supported (CONNECT only)"};
  }
  if (!request.address) {
    return std::pair{Reply::kAddressTypeNotSupported,
                     request.domain.empty()
                         ? "socks5 address type " + std::to_string(request.address_type) + " is not supported"
                         : "socks5 domain name '" + request.domain + "' is not supported (no DNS yet)"};
  }
  return std::nullopt;
}

}  // namespace

asio::awaitable<base::Result<base::OrigDstAddr>> negotiate(net::ByteStream& in) {
  std::vector<std::byte> buf;
  auto greeting_len = co_await read_message(in, buf, parse_greeting);
  if (!greeting_len) co_return std::unexpected(greeting_len.error());
  const bool no_auth = *parse_greeting(buf)->value;
  const std::array<std::byte, 2> choice{std::byte{kVersion}, std::byte{no_auth ? kNoAuth : kNoAcceptableMethod}};
  if (auto w = co_await in.write_all(choice); !w) co_return std::unexpected(w.error());
  if (!no_auth) co_return base::fail(base::Errc::kProtocol, "socks5 client offered no 'no authentication' method");
  buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*greeting_len));
  auto request_len = co_await read_message(in, buf, parse_request);
  if (!request_len) co_return std::unexpected(request_len.error());
  const Request request = *parse_request(buf)->value;
  if (auto refusal = refusal_of(request)) {
    const auto reply = make_reply(refusal->first);
    // Ignored: the negotiation fails either way; the client may already be gone.
    (void)co_await in.write_all(reply);
    co_return base::fail(base::Errc::kProtocol, std::move(refusal->second));
  }
  co_return base::OrigDstAddr{*request.address};
}

Reply reply_for(const base::Error& error) noexcept {
  switch (error.code) {
    case base::Errc::kRecursiveCall:
    case base::Errc::kPolicyDenied: return Reply::kNotAllowed;
    case base::Errc::kConnectFailed: return Reply::kConnectionRefused;
    case base::Errc::kTimeout:
    case base::Errc::kNoHealthyUpstream: return Reply::kHostUnreachable;
    default: return Reply::kGeneralFailure;
  }
}

}  // namespace socks5

asio::awaitable<void> Socks5::serve(asio::ip::tcp::socket socket, TraceId id) {
  auto peer = net::peer_addr(socket.native_handle());
  net::TcpStream downstream(std::move(socket));
  OutboundTunnel t;
  auto guard = pod_.tracker.track([&] {
    downstream.reset();
    t.reset();
  });
  net::Deadline deadline(pod_.io.get_executor(), pod_.inputs.options.connect_timeout, [&] { downstream.reset(); });
  auto target = co_await socks5::negotiate(downstream);
  deadline.cancel();
  if (!peer || !target) {
    downstream.reset();
    spdlog::warn("access\tconnection failed\tid={} src.addr={} direction=outbound error=\"{}\"", id.hex(),
                 peer ? peer->to_string() : "-", (peer ? target.error() : peer.error()).message());
    co_return;
  }
  // The app dialled loopback; upstream, the connection comes from the pod's own address.
  base::ClientAddr client{*peer};
  if (!pod_.pod->ips.empty()) client.addr.ip = pod_.pod->ips.front();
  auto opened = co_await outbound_.open(t, client, *target, id);
  const auto reply = socks5::make_reply(opened ? socks5::Reply::kSucceeded : socks5::reply_for(opened.error()));
  auto replied = co_await downstream.write_all(reply);
  if (!opened || !replied) {
    // A refusal's reply is best effort: the refusal reason is the connection's outcome.
    downstream.reset();
    t.reset();
    outbound_.refuse(t, opened ? std::move(replied.error()) : std::move(opened.error()));
    co_return;
  }
  co_await outbound_.carry(t, downstream);
}

}  // namespace meshnode::proxy
