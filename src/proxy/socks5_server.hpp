#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include "base/address_roles.hpp"
#include "base/error.hpp"
#include "net/byte_stream.hpp"
#include "proxy/outbound.hpp"
#include "proxy/pod_context.hpp"
#include "proxy/socks5.hpp"

namespace meshnode::proxy {

namespace socks5 {

/// RFC 1928 negotiation on `client`: the no-authentication greeting, then one CONNECT to an IP
/// address. A command other than CONNECT, or a domain name / unknown address type, is answered
/// with its RFC 1928 refusal before returning. Reads only what each message needs.
/// @returns the requested target; Errc::kProtocol naming what the client got wrong (version,
///          methods, command, address type, EOF during negotiation); the stream's read/write errors.
asio::awaitable<base::Result<base::OrigDstAddr>> negotiate(net::ByteStream& client);

/// The RFC 1928 §6 reply for an outbound refusal: policy and capture loops → not allowed,
/// refused connects → connection refused, timeouts and no endpoint → host unreachable, anything
/// else → general failure.
[[nodiscard]] Reply reply_for(const base::Error& error) noexcept;

}  // namespace socks5

/// The socks5 path (15080 on the pod's 127.0.0.1, UNSTABLE_ENABLE_SOCKS5): negotiates within the
/// connect timeout, then carries the connection as Outbound does, answering the client once the
/// upstream is (or is not) reached. Upstream, the connection comes from the pod's own address.
/// Worker thread only.
class Socks5 {
 public:
  Socks5(PodContext& pod, Outbound& outbound) : pod_(pod), outbound_(outbound) {}

  asio::awaitable<void> serve(asio::ip::tcp::socket socket, TraceId id);

 private:
  PodContext& pod_;
  Outbound& outbound_;
};

}  // namespace meshnode::proxy
