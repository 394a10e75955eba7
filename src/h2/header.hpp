#pragma once

#include <string>
#include <vector>

namespace meshnode::h2 {

/// One HTTP/2 header field; names are lowercase (RFC 9113 §8.2.1). Pseudo-headers start with ':'.
struct Header {
  std::string name;
  std::string value;
};
using Headers = std::vector<Header>;

}  // namespace meshnode::h2
