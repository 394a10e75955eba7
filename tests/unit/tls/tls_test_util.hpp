#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <random>
#include <string>

#include "base/spiffe.hpp"
#include "tls/cert_manager.hpp"
#include "tls/local_ca.hpp"

namespace meshnode::tls::testing {

/// A fresh, uniquely named directory under the temp dir, removed (recursively) on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("meshnode-tls-" + std::to_string(::getpid()) + "-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// A certificate manager over a built-in CA created in `dir` (throws when it cannot be made).
inline std::unique_ptr<CertManager> cert_manager_in(const TempDir& dir) {
  auto ca = LocalCa::load_or_create(dir.path());
  if (!ca) throw std::runtime_error(ca.error().message());
  return std::make_unique<CertManager>(std::move(*ca));
}

inline base::SpiffeId spiffe(std::string td, std::string ns, std::string sa) {
  return base::SpiffeId{std::move(td), std::move(ns), std::move(sa)};
}

}  // namespace meshnode::tls::testing
