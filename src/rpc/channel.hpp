#pragma once

// gRPC channel and call setup for the Istio control plane (xDS and CA). Includes gRPC headers: only
// the translation units that talk gRPC include this.

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>

#include <chrono>
#include <memory>

#include "base/error.hpp"
#include "rpc/endpoint.hpp"

namespace meshnode::rpc {

/// A channel to `endpoint`: TLS with the endpoint's roots (or plaintext for http://), the
/// server name override ALT_<PREFIX>_HOSTNAME, HTTP/2 keepalive PING 30 s / 10 s timeout, connect
/// timeout 5 s, max received message 200 MiB (research §2.3), and channel reconnect backoff
/// capped at `max_reconnect_backoff` (our callers run their own backoff on top).
/// @returns Errc::kConfig / Errc::kIo from root_pem(). Blocking file I/O (control thread).
[[nodiscard]] Result<std::shared_ptr<::grpc::Channel>> make_channel(
    const Endpoint& endpoint, std::chrono::milliseconds max_reconnect_backoff = std::chrono::seconds(1));

/// Adds call_metadata(endpoint) to `context` (the token file is re-read now).
/// Errors as call_metadata().
[[nodiscard]] Result<void> add_metadata(::grpc::ClientContext& context, const Endpoint& endpoint);

}  // namespace meshnode::rpc
