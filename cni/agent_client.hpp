#pragma once

#include <chrono>

#include "base/error.hpp"
#include "cni/http.hpp"
#include "cni/plugin.hpp"

namespace meshnode::cni {

/// Sends `call` as one HTTP/1.1 POST over the agent's Unix stream socket and reads the reply.
/// Blocking; the whole exchange (connect, write, read) is bounded by `timeout` (steady clock).
/// @returns the reply (any status); Errc::kConnectFailed (socket missing, nobody listening; cause
///          = errno), Errc::kTimeout (no complete reply in time), Errc::kIo (send/recv failed),
///          Errc::kProtocol (malformed reply, see parse_response).
[[nodiscard]] base::Result<HttpReply> post_to_agent(const AgentCall& call, std::chrono::milliseconds timeout);

}  // namespace meshnode::cni
