#pragma once

#include <cstdint>
#include <optional>

#include "base/error.hpp"

namespace meshnode::proxy {

/// Bytes moved by copy_bidirectional, per direction, and how the copy ended.
struct Transferred {
  std::uint64_t downstream_to_upstream = 0;  ///< bytes, client → server
  std::uint64_t upstream_to_downstream = 0;  ///< bytes, server → client
  std::optional<base::Error> error;           ///< first error of either direction, if any
};

}  // namespace meshnode::proxy
