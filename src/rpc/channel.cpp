#include "rpc/channel.hpp"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

namespace meshnode::rpc {

Result<std::shared_ptr<::grpc::Channel>> make_channel(const Endpoint& endpoint,
                                                      std::chrono::milliseconds max_reconnect_backoff) {
  ::grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetMaxReceiveMessageSize(200 * 1024 * 1024);
  // gRPC's minimum reconnect backoff doubles as its connect timeout (5 s, as the reference).
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5'000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, static_cast<int>(max_reconnect_backoff.count()));
  std::shared_ptr<::grpc::ChannelCredentials> creds;
  if (endpoint.tls) {
    auto roots = root_pem(endpoint);
    if (!roots) return std::unexpected(roots.error());
    ::grpc::SslCredentialsOptions options;
    options.pem_root_certs = std::move(*roots);  // empty = gRPC's default (system) roots
    creds = ::grpc::SslCredentials(options);
    if (!endpoint.alt_hostname.empty()) args.SetSslTargetNameOverride(endpoint.alt_hostname);
  } else {
    creds = ::grpc::InsecureChannelCredentials();
  }
  return ::grpc::CreateCustomChannel(endpoint.target, creds, args);
}

Result<void> add_metadata(::grpc::ClientContext& context, const Endpoint& endpoint) {
  auto metadata = call_metadata(endpoint);
  if (!metadata) return std::unexpected(metadata.error());
  for (const auto& [name, value] : *metadata) context.AddMetadata(name, value);
  return {};
}

}  // namespace meshnode::rpc
