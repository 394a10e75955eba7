#pragma once

#include <string>

#include "base/error.hpp"

namespace meshnode::agent {

/// The outcome of one libnftables batch.
struct NftRun {
  int rc = 0;        ///< 0 = committed (batches are atomic: otherwise nothing of it was)
  std::string out;   ///< listing output
  std::string err;   ///< nft's error text
};

/// Runs `commands` (nft syntax, one batch) with a fresh nft_ctx created in the calling thread's
/// current netns: libnftables binds its netlink socket to the netns current at nft_ctx_new()
/// (env-probe §4), so call it inside Netns::run_in for another netns. Errc::kInternal when the
/// context cannot be made. Blocking.
[[nodiscard]] base::Result<NftRun> nft_run(const std::string& commands);

/// `text` without trailing newlines and spaces (nft's error text ends with them). Pure.
[[nodiscard]] std::string trimmed(std::string text);

}  // namespace meshnode::agent
