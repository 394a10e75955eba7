#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/ip.hpp"
#include "state/service.hpp"
#include "state/workload.hpp"

namespace meshnode::state::test {

/// Parses an IP literal the test wrote itself (aborts the test binary on a typo).
inline base::IpAddr ip(std::string_view text) { return base::IpAddr::parse(text).value(); }

inline Workload workload(std::string uid, std::string ns, std::string sa,
                         std::initializer_list<std::string_view> ips,
                         TunnelProtocol protocol = TunnelProtocol::kHbone) {
  Workload w;
  w.uid = uid;
  w.name = std::move(uid);
  w.ns = std::move(ns);
  w.service_account = std::move(sa);
  for (auto text : ips) w.addresses.push_back(ip(text));
  w.protocol = protocol;
  return w;
}

inline Service service(std::string ns, std::string name, std::initializer_list<std::string_view> vips,
                       std::vector<PortMapping> ports) {
  Service s;
  s.name = name;
  s.ns = ns;
  s.hostname = name + "." + ns + ".svc.cluster.local";
  for (auto text : vips) s.vips.push_back(NetworkAddress{"", ip(text)});
  s.ports = std::move(ports);
  return s;
}

}  // namespace meshnode::state::test
