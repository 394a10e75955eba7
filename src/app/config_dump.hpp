#pragma once

#include <string>
#include <vector>

#include "state/snapshot.hpp"
#include "tls/cert_manager.hpp"

namespace meshnode::app {

/// One enrolled pod as /config_dump shows it under `workloadState`.
struct EnrolledPod {
  std::string uid;
  std::string name;
  std::string ns;
  std::string service_account;
  std::string netns;
  std::string state;  ///< "Up" | "Pending"
};

/// The /config_dump JSON (research §5.2 shape, camelCase): workloads, services, policies,
/// workloadState (enrolled pods), certificates (identity, serial, validity). Pretty-printed.
[[nodiscard]] std::string config_dump_json(const state::StateSnapshot& snapshot, const std::vector<EnrolledPod>& pods,
                                           const std::vector<tls::CertInfo>& certificates);

}  // namespace meshnode::app
