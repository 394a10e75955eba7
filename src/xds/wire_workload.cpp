// The fast path of Address → state::Workload: reads the protobuf wire bytes directly (no message
// object, no string copies but the ones the Workload keeps). It only ever accepts what it can
// convert exactly as to_workload() would after a protobuf parse; anything else — a field it does
// not know, a repeated embedded message (protobuf would merge), a non-ASCII string (protobuf
// validates UTF-8), a value to_workload() rejects, malformed bytes — returns false and the caller
// takes the protobuf path, which then gives the usual result or error. So results and error
// messages are those of to_workload() by construction (tests/unit/xds/wire_workload_test.cpp
// compares both on many generated and mutated inputs).

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "xds/convert.hpp"
#include "xds/wire.hpp"

namespace meshnode::xds {
namespace {

using wire::kLen;
using wire::kVarint;
using wire::Reader;
using wire::reader_of;
using wire::string_field;

bool varint_field(Reader& r, std::uint32_t type, std::uint64_t& out) { return type == kVarint && r.varint(out); }

// istio.workload.Port → mapping, as workload_ports() (target 0 = the service port).
bool port(std::string_view bytes, state::PortMapping& out) {
  Reader r = reader_of(bytes);
  std::uint32_t service = 0, target = 0;
  while (!r.done()) {
    std::uint32_t field = 0, type = 0;
    std::uint64_t v = 0;
    if (!r.tag(field, type) || !varint_field(r, type, v) || field > 3) return false;
    if (field == 1) service = static_cast<std::uint32_t>(v);
    if (field == 2) target = static_cast<std::uint32_t>(v);
    // field 3, app_protocol: not used by the conversion
  }
  if (service == 0 || service > 65535 || target > 65535) return false;
  out.service_port = static_cast<std::uint16_t>(service);
  out.target_port = static_cast<std::uint16_t>(target == 0 ? service : target);
  return true;
}

// One entry of `map<string, PortList> services`.
bool service_entry(std::string_view bytes, state::InternedStringBatch& strings, state::Workload& w) {
  Reader r = reader_of(bytes);
  std::string_view key, list;
  bool has_key = false, has_list = false;
  while (!r.done()) {
    std::uint32_t field = 0, type = 0;
    if (!r.tag(field, type)) return false;
    if (field == 1 && !has_key) {
      if (!string_field(r, type, key)) return false;
      has_key = true;
    } else if (field == 2 && !has_list && type == kLen) {
      if (!r.bytes(list)) return false;
      has_list = true;
    } else {
      return false;
    }
  }
  auto slash = key.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == key.size()) return false;
  std::vector<state::PortMapping> ports;
  Reader lr = reader_of(list);
  while (!lr.done()) {
    std::uint32_t field = 0, type = 0;
    std::string_view one;
    if (!lr.tag(field, type) || field != 1 || type != kLen || !lr.bytes(one)) return false;
    state::PortMapping m;
    if (!port(one, m)) return false;
    ports.push_back(m);
  }
  if (w.services.contains(key)) return false;  // a repeated key: protobuf keeps the last one
  w.services.emplace(strings.get(key, 13), std::move(ports));
  return true;
}

struct Fields {
  std::string_view uid, name, ns, network, trust_domain, service_account, node, canonical_name,
      canonical_revision, workload_name, cluster_id, hostname, region, zone, subzone;
  std::uint64_t tunnel_protocol = 0, workload_type = 0, status = 0, network_mode = 0, capacity = 0,
                native_tunnel = 0;
  bool has_locality = false, has_capacity = false;
};

bool locality(std::string_view bytes, Fields& f) {
  Reader r = reader_of(bytes);
  while (!r.done()) {
    std::uint32_t field = 0, type = 0;
    if (!r.tag(field, type)) return false;
    std::string_view* out = field == 1 ? &f.region : field == 2 ? &f.zone : field == 3 ? &f.subzone : nullptr;
    if (out == nullptr || !string_field(r, type, *out)) return false;
  }
  return true;
}

bool capacity(std::string_view bytes, Fields& f) {
  Reader r = reader_of(bytes);
  while (!r.done()) {
    std::uint32_t field = 0, type = 0;
    if (!r.tag(field, type) || field != 1 || !varint_field(r, type, f.capacity)) return false;
  }
  return true;
}

// `site` numbers the field for the batch's last-value shortcut (consecutive pods of one
// deployment or namespace repeat most of their shared fields).
void assign(state::InternedString& out, std::string_view in, state::InternedStringBatch& strings, std::size_t site) {
  if (in.empty()) {
    out = state::InternedString();
  } else if (out != in) {
    out = strings.get(in, site);
  }
}

bool workload(std::string_view bytes, state::InternedStringBatch& strings, state::Workload& w) {
  Fields f;
  // Repeated fields are collected as views first: the conversion needs network_mode, which may
  // come after the addresses.
  std::string_view addresses[4];
  int address_count = 0;
  std::string_view services[8];
  std::size_t service_count = 0;
  std::vector<std::string_view> policies;
  Reader r = reader_of(bytes);
  while (!r.done()) {
    std::uint32_t field = 0, type = 0;
    if (!r.tag(field, type)) return false;
    bool ok = false;
    switch (field) {
      case 1: ok = string_field(r, type, f.name); break;
      case 2: ok = string_field(r, type, f.ns); break;
      case 3:
        if (address_count == 4) return false;  // more than the fast path keeps aside
        ok = type == kLen && r.bytes(addresses[address_count++]);
        break;
      case 4: ok = string_field(r, type, f.network); break;
      case 5: ok = varint_field(r, type, f.tunnel_protocol); break;
      case 6: ok = string_field(r, type, f.trust_domain); break;
      case 7: ok = string_field(r, type, f.service_account); break;
      case 9: ok = string_field(r, type, f.node); break;
      case 10: ok = string_field(r, type, f.canonical_name); break;
      case 11: ok = string_field(r, type, f.canonical_revision); break;
      case 12: ok = varint_field(r, type, f.workload_type); break;
      case 13: ok = string_field(r, type, f.workload_name); break;
      case 14: ok = varint_field(r, type, f.native_tunnel); break;
      case 16: {
        std::string_view p;
        ok = string_field(r, type, p);
        policies.push_back(p);
        break;
      }
      case 17: ok = varint_field(r, type, f.status); break;
      case 18: ok = string_field(r, type, f.cluster_id); break;
      case 20: ok = string_field(r, type, f.uid); break;
      case 21: ok = string_field(r, type, f.hostname); break;
      case 22: {
        if (service_count == 8) return false;  // more than the fast path keeps aside
        ok = type == kLen && r.bytes(services[service_count++]);
        break;
      }
      case 24: {
        std::string_view sub;
        ok = !f.has_locality && type == kLen && r.bytes(sub) && locality(sub, f);
        f.has_locality = true;
        break;
      }
      case 25: ok = varint_field(r, type, f.network_mode); break;
      case 27: {
        std::string_view sub;
        ok = !f.has_capacity && type == kLen && r.bytes(sub) && capacity(sub, f);
        f.has_capacity = true;
        break;
      }
      default:  // waypoint, network_gateway, application_tunnel, extensions, unknown fields
        return false;
    }
    if (!ok) return false;
  }
  // From here on: to_workload()'s success path, field by field.
  if (f.uid.empty()) return false;
  // Enums are int32 on the wire side of protobuf: a 64-bit varint keeps its low 32 bits.
  auto enum_value = [](std::uint64_t v) { return static_cast<std::int32_t>(static_cast<std::uint32_t>(v)); };
  const std::int32_t protocol = enum_value(f.tunnel_protocol);
  if (protocol != 0 && protocol != 1) return false;  // LEGACY_ISTIO_MTLS or unknown: rejected there
  w.uid = f.uid;
  w.name = f.name;
  assign(w.ns, f.ns, strings, 0);
  if (!f.service_account.empty()) assign(w.service_account, f.service_account, strings, 1);
  if (!f.trust_domain.empty()) assign(w.trust_domain, f.trust_domain, strings, 2);
  if (!f.cluster_id.empty()) assign(w.cluster_id, f.cluster_id, strings, 3);
  assign(w.node, f.node, strings, 4);
  assign(w.network, f.network, strings, 5);
  assign(w.hostname, f.hostname, strings, 6);
  assign(w.canonical_name, f.canonical_name, strings, 7);
  assign(w.canonical_revision, f.canonical_revision, strings, 8);
  // Usually the same value (istiod sets both from the owning deployment): no second lookup.
  if (f.workload_name == f.canonical_name) {
    w.workload_name = w.canonical_name;
  } else {
    assign(w.workload_name, f.workload_name, strings, 9);
  }
  switch (enum_value(f.workload_type)) {
    case 1: w.workload_type = strings.get("cronjob"); break;
    case 2: w.workload_type = strings.get("pod"); break;
    case 3: w.workload_type = strings.get("job"); break;
    default: w.workload_type = state::default_workload_type(); break;
  }
  if (f.has_locality) {
    assign(w.locality.region, f.region, strings, 10);
    assign(w.locality.zone, f.zone, strings, 11);
    assign(w.locality.subzone, f.subzone, strings, 12);
  }
  w.protocol = protocol == 1 ? state::TunnelProtocol::kHbone : state::TunnelProtocol::kNone;
  w.native_tunnel = f.native_tunnel != 0;
  if (enum_value(f.network_mode) != 1) {  // HOST_NETWORK drops the addresses
    w.addresses.reserve(static_cast<std::size_t>(address_count));
    for (int i = 0; i < address_count; ++i) {
      auto ip = base::IpAddr::from_bytes(addresses[i]);
      if (!ip) return false;
      w.addresses.push_back(*ip);
    }
  }
  w.services.reserve(service_count);
  for (std::size_t i = 0; i < service_count; ++i) {
    if (!service_entry(services[i], strings, w)) return false;
  }
  w.authorization_policies.assign(policies.begin(), policies.end());
  w.healthy = enum_value(f.status) != 1;  // UNHEALTHY
  w.capacity = f.has_capacity ? static_cast<std::uint32_t>(f.capacity) : 1;
  return true;
}

}  // namespace

bool fast_workload_from_address(std::string_view address, state::InternedStringBatch& strings,
                                state::Workload& out) {
  // Address: exactly one `workload` (field 1) and nothing else; a service, or a repeated
  // workload (protobuf merges them), goes the protobuf way.
  Reader r = reader_of(address);
  std::uint32_t field = 0, type = 0;
  std::string_view body;
  if (!r.tag(field, type) || field != 1 || type != kLen || !r.bytes(body) || !r.done()) return false;
  return workload(body, strings, out);
}

}  // namespace meshnode::xds
