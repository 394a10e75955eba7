#include "hbone/identity.hpp"

#include "net/await_callback.hpp"

namespace meshnode::hbone {

using Tls = tls::IdentitySource::Tls;

asio::awaitable<base::Result<Tls>> acquire_identity(tls::IdentitySource& certs, const base::SpiffeId& id,
                                                    std::chrono::steady_clock::duration timeout) {
  if (auto now = certs.current(id)) co_return now;
  auto answer = co_await net::await_callback<base::Result<Tls>>(
      timeout, [&certs, &id](std::function<void(base::Result<Tls>)> reply) { certs.fetch(id, std::move(reply)); });
  if (answer) co_return std::move(*answer);
  co_return base::fail(base::Errc::kCertificate,
                       "no certificate for " + id.to_string() + " within " +
                           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
                           " ms");
}

}  // namespace meshnode::hbone
