#pragma once

#include <asio/awaitable.hpp>

#include <chrono>

#include "base/error.hpp"
#include "base/spiffe.hpp"
#include "tls/cert_manager.hpp"

namespace meshnode::hbone {

/// The TLS material a connection needs to speak as `id`: the valid certificate at once when there
/// is one, else waits (on the calling coroutine's executor) for `certs.fetch` to answer — the
/// certificate, or the error naming the identity — at most `timeout`, after which it fails with
/// Errc::kCertificate "no certificate for <id> within <n> ms". Never returns an expired
/// certificate: the connection fails closed with the source's reason.
asio::awaitable<base::Result<tls::IdentitySource::Tls>> acquire_identity(tls::IdentitySource& certs,
                                                                         const base::SpiffeId& id,
                                                                         std::chrono::steady_clock::duration timeout);

}  // namespace meshnode::hbone
