#include "agent/nft.hpp"

#include <nftables/libnftables.h>

#include <memory>

#include "base/deleter.hpp"

namespace meshnode::agent {

using NftCtxPtr = std::unique_ptr<nft_ctx, base::Deleter<&nft_ctx_free>>;

base::Result<NftRun> nft_run(const std::string& commands) {
  NftCtxPtr ctx(nft_ctx_new(NFT_CTX_DEFAULT));
  if (!ctx) return base::fail(base::Errc::kInternal, "nft_ctx_new failed");
  if (nft_ctx_buffer_output(ctx.get()) != 0 || nft_ctx_buffer_error(ctx.get()) != 0) {
    return base::fail(base::Errc::kInternal, "nft_ctx_buffer_output/error failed");
  }
  NftRun run;
  run.rc = nft_run_cmd_from_buffer(ctx.get(), commands.c_str());
  if (const char* out = nft_ctx_get_output_buffer(ctx.get())) run.out = out;
  if (const char* err = nft_ctx_get_error_buffer(ctx.get())) run.err = err;
  return run;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace meshnode::agent
