// meshnode-fake-istiod: the test control plane (FakeXdsServer + FakeCaServer, real gRPC + TLS) as a
// process, serving the resources of a YAML/JSON file (fakes/resource_loader.hpp) to meshnode-proxy
// in the demo (scripts/demo.sh --control-plane) and the end-to-end tests.
//
//   meshnode-fake-istiod --resources FILE --root-cert OUT [--listen IP] [--xds-port N] [--ca-port N]
//                        [--cert-lifetime SECONDS]
//
// Prints "ready xds=<url> ca=<url>" once both listen, then reads one command per line on stdin and
// answers each with one line, "ok ..." or "error ...":
//   reload [FILE]          re-read the resource file; push changed/new resources and removals
//   xds stop|start         the xDS server goes down / comes back on the same port
//   ca stop|start          the CA goes down / comes back
//   ca fail on|off         every CreateCertificate fails (UNAVAILABLE) while on
//   ca lifetime N|off      issue N-second certificates (off: as requested)
//   calls                  "call identity=<id> serial=<hex>" per CA call, then ok
//   crl OUT SERIAL...      write a CRL (PEM) revoking SERIALs, signed by the issuing CA
//   nacks                  "nack type=<url> error=<message>" per NACK received, then ok
//   initial                "initial stream=<n> type=<url> versions=<k>" per request carrying
//                          initial_resource_versions (a reconnect), then ok
// EOF on stdin or SIGTERM ends it.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "fakes/ca_server.hpp"
#include "fakes/resource_loader.hpp"
#include "fakes/test_ca.hpp"
#include "fakes/xds_server.hpp"

namespace {

using meshnode::fakes::FakeCaServer;
using meshnode::fakes::FakeXdsServer;
using meshnode::fakes::ResourceSet;
using Resource = envoy::service::discovery::v3::Resource;

constexpr const char* kAddressType = "type.googleapis.com/istio.workload.Address";
constexpr const char* kAuthorizationType = "type.googleapis.com/istio.security.Authorization";

struct Args {
  std::string resources;
  std::string root_cert;
  std::string listen = "127.0.0.1";
  int xds_port = 0;
  int ca_port = 0;
  int lifetime = 0;
};

bool parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) return false;
    std::string v = argv[++i];
    if (k == "--resources") a.resources = v;
    else if (k == "--root-cert") a.root_cert = v;
    else if (k == "--listen") a.listen = v;
    else if (k == "--xds-port") a.xds_port = std::stoi(v);
    else if (k == "--ca-port") a.ca_port = std::stoi(v);
    else if (k == "--cert-lifetime") a.lifetime = std::stoi(v);
    else return false;
  }
  return !a.resources.empty() && !a.root_cert.empty();
}

/// Pushes the difference between what the server holds (`held`) and `next` for one type.
void sync_type(FakeXdsServer& xds, const char* type_url, std::map<std::string, std::string>& held,
               const std::vector<Resource>& next) {
  std::vector<Resource> changed;
  std::map<std::string, std::string> now;
  for (const auto& r : next) {
    now[r.name()] = r.version();
    auto it = held.find(r.name());
    if (it == held.end() || it->second != r.version()) changed.push_back(r);
  }
  std::vector<std::string> removed;
  for (const auto& [name, version] : held) {
    if (!now.contains(name)) removed.push_back(name);
  }
  held = std::move(now);
  if (!changed.empty() || !removed.empty()) (void)xds.push(type_url, std::move(changed), std::move(removed));
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!parse_args(argc, argv, args)) {
    std::fprintf(stderr,
                 "usage: meshnode-fake-istiod --resources FILE --root-cert OUT [--listen IP] [--xds-port N] "
                 "[--ca-port N] [--cert-lifetime SECONDS]\n");
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);
  auto ca = meshnode::fakes::TestCa::create({});
  if (!ca) {
    std::fprintf(stderr, "fake-istiod: %s\n", ca.error().message().c_str());
    return 1;
  }
  {
    std::ofstream out(args.root_cert);
    out << (*ca)->root_bundle_pem();
    if (!out) {
      std::fprintf(stderr, "fake-istiod: cannot write %s\n", args.root_cert.c_str());
      return 1;
    }
  }
  auto initial = meshnode::fakes::load_resources(args.resources);
  if (!initial) {
    std::fprintf(stderr, "fake-istiod: %s\n", initial.error().message().c_str());
    return 2;
  }
  auto xds = FakeXdsServer::start(*ca, "istiod.istio-system.svc", args.listen, args.xds_port);
  auto cas = FakeCaServer::start(*ca, "istiod.istio-system.svc", args.listen, args.ca_port);
  if (!xds || !cas) {
    std::fprintf(stderr, "fake-istiod: %s\n", (!xds ? xds.error() : cas.error()).message().c_str());
    return 1;
  }
  if (args.lifetime > 0) (*cas)->set_lifetime(std::chrono::seconds(args.lifetime));
  std::map<std::string, std::string> held_addresses, held_policies;
  sync_type(**xds, kAddressType, held_addresses, initial->addresses);
  sync_type(**xds, kAuthorizationType, held_policies, initial->authorizations);
  std::cout << "ready xds=" << (*xds)->address() << " ca=" << (*cas)->address() << std::endl;

  for (std::string line; std::getline(std::cin, line);) {
    auto w = words(line);
    if (w.empty()) continue;
    std::string answer = "ok " + line;
    if (w[0] == "reload") {
      auto next = meshnode::fakes::load_resources(w.size() > 1 ? w[1] : args.resources);
      if (!next) {
        answer = "error " + next.error().message();
      } else {
        sync_type(**xds, kAddressType, held_addresses, next->addresses);
        sync_type(**xds, kAuthorizationType, held_policies, next->authorizations);
      }
    } else if (w[0] == "xds" && w.size() == 2 && (w[1] == "stop" || w[1] == "start")) {
      if (w[1] == "stop") {
        (*xds)->stop();
      } else if (auto ok = (*xds)->restart(); !ok) {
        answer = "error " + ok.error().message();
      }
    } else if (w[0] == "ca" && w.size() == 2 && (w[1] == "stop" || w[1] == "start")) {
      if (w[1] == "stop") {
        (*cas)->stop();
      } else if (auto ok = (*cas)->restart(); !ok) {
        answer = "error " + ok.error().message();
      }
    } else if (w[0] == "ca" && w.size() == 3 && w[1] == "fail") {
      (*cas)->set_failing(w[2] == "on");
    } else if (w[0] == "ca" && w.size() == 3 && w[1] == "lifetime") {
      if (w[2] == "off") (*cas)->set_lifetime(std::nullopt);
      else (*cas)->set_lifetime(std::chrono::seconds(std::stoi(w[2])));
    } else if (w[0] == "calls") {
      for (const auto& c : (*cas)->calls()) {
        std::cout << "call identity=" << c.identity << " serial=" << c.serial_hex << "\n";
      }
    } else if (w[0] == "nacks") {
      for (const auto& r : (*xds)->requests()) {
        if (r.is_nack()) {
          std::cout << "nack type=" << r.request.type_url() << " error=" << r.request.error_detail().message() << "\n";
        }
      }
    } else if (w[0] == "initial") {
      for (const auto& r : (*xds)->requests()) {
        if (r.request.initial_resource_versions_size() > 0) {
          std::cout << "initial stream=" << r.stream << " type=" << r.request.type_url()
                    << " versions=" << r.request.initial_resource_versions_size() << "\n";
        }
      }
    } else if (w[0] == "crl" && w.size() >= 3) {
      auto pem = (*ca)->crl_pem(std::vector<std::string>(w.begin() + 2, w.end()));
      if (!pem) {
        answer = "error " + pem.error().message();
      } else {
        // Written next to the target and renamed: a reader never sees half a file.
        std::string tmp = w[1] + ".tmp";
        std::ofstream(tmp) << *pem;
        if (std::rename(tmp.c_str(), w[1].c_str()) != 0) answer = "error cannot write " + w[1];
      }
    } else {
      answer = "error unknown command: " + line;
    }
    std::cout << answer << std::endl;
  }
  return 0;
}
