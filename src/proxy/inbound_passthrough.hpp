#pragma once

#include <asio/awaitable.hpp>
#include <asio/ip/tcp.hpp>

#include "proxy/pod_context.hpp"

namespace meshnode::proxy {

/// The inbound plaintext path (15006, research §4.3): a connection redirected to the pod without
/// HBONE is authorized with no peer identity (so "mTLS required" policies deny it), connected to
/// the app it was meant for (SO_ORIGINAL_DST) and copied; refusals reset it. Worker thread only.
class InboundPassthrough {
 public:
  explicit InboundPassthrough(PodContext& pod) : pod_(pod) {}

  asio::awaitable<void> serve(asio::ip::tcp::socket socket, TraceId id);

 private:
  PodContext& pod_;
};

}  // namespace meshnode::proxy
