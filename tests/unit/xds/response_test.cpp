// DecodedResponse must give exactly ResponseView::of() of what protobuf parses, or hand the bytes
// to protobuf: compared on generated responses (every field, unknown fields, non-ASCII strings,
// fields our proto defines that apply() does not read), byte-level mutations of them, and every
// way of cutting them into segments (gRPC's slices), from one segment to one byte per segment.

#include "xds/response.hpp"

#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "discovery.pb.h"
#include "unit/xds/resources.hpp"
#include "xds/convert.hpp"

namespace meshnode::xds {
namespace {

namespace discovery = envoy::service::discovery::v3;

struct Checked {
  int in_place = 0;  // read in place, and equal to the protobuf path
  int declined = 0;  // left to protobuf
};

void expect_equal(const ResponseView& a, const ResponseView& b, const std::string& what) {
  EXPECT_EQ(a.system_version_info, b.system_version_info) << what;
  EXPECT_EQ(a.type_url, b.type_url) << what;
  EXPECT_EQ(a.nonce, b.nonce) << what;
  EXPECT_EQ(a.removed_resources, b.removed_resources) << what;
  ASSERT_EQ(a.resources.size(), b.resources.size()) << what;
  for (std::size_t i = 0; i < a.resources.size(); ++i) {
    const ResourceView& x = a.resources[i];
    const ResourceView& y = b.resources[i];
    EXPECT_EQ(x.name, y.name) << what << " resource " << i;
    EXPECT_EQ(x.version, y.version) << what << " resource " << i;
    EXPECT_EQ(x.has_payload, y.has_payload) << what << " resource " << i;
    EXPECT_EQ(x.payload_type, y.payload_type) << what << " resource " << i;
    EXPECT_EQ(x.payload, y.payload) << what << " resource " << i;
  }
}

// `bytes` cut at the given points.
std::vector<std::string_view> cut(std::string_view bytes, std::vector<std::size_t> at) {
  std::vector<std::string_view> out;
  std::size_t from = 0;
  for (std::size_t to : at) {
    to = std::min(std::max(to, from), bytes.size());
    out.push_back(bytes.substr(from, to - from));
    from = to;
  }
  out.push_back(bytes.substr(from));
  return out;
}

// The property, for one input and one segmentation.
void check(const std::string& bytes, const std::vector<std::string_view>& segments, Checked& counts,
           const std::string& what) {
  discovery::DeltaDiscoveryResponse message;
  bool parses = message.ParseFromString(bytes);
  auto decoded = DecodedResponse::decode(segments);
  ASSERT_EQ(decoded.has_value(), parses) << what;
  if (!parses) {
    EXPECT_NE(decoded.error().context.find("does not parse"), std::string::npos) << what;
    ++counts.declined;
    return;
  }
  decoded->in_place() ? ++counts.in_place : ++counts.declined;
  expect_equal(decoded->view(), ResponseView::of(message), what);
}

std::string pick(std::mt19937& rng, const std::vector<std::string>& from) {
  return from[rng() % from.size()];
}

discovery::DeltaDiscoveryResponse generated(std::mt19937& rng) {
  const std::vector<std::string> strings = {
      "", "a", "Kubernetes//Pod/ns/web-1", "ns/svc.ns.svc.cluster.local", std::string(300, 'x'), "v1"};
  const std::vector<std::string> types = {std::string(kAddressType), std::string(kAuthorizationType), "x",
                                          ""};
  auto chance = [&](int in) { return rng() % static_cast<unsigned>(in) == 0; };
  discovery::DeltaDiscoveryResponse r;
  if (chance(2)) r.set_system_version_info(pick(rng, strings));
  r.set_type_url(pick(rng, types));
  r.set_nonce(chance(4) ? pick(rng, strings) : std::to_string(rng() % 1000));
  int resources = static_cast<int>(rng() % 12);
  for (int i = 0; i < resources; ++i) {
    auto* res = r.add_resources();
    res->set_name(chance(6) ? pick(rng, strings) : "Kubernetes//Pod/ns/p" + std::to_string(i));
    if (chance(2)) res->set_version(pick(rng, strings));
    if (!chance(6)) {
      res->mutable_resource()->set_type_url(chance(6) ? pick(rng, types) : std::string(kAddressType));
      std::string payload(rng() % 600, '\0');
      for (auto& c : payload) c = static_cast<char>(rng());
      res->mutable_resource()->set_value(payload);
    }
    if (chance(40)) res->add_aliases("alias");
    if (chance(40)) res->mutable_ttl()->set_seconds(30);
    if (chance(40)) res->mutable_cache_control()->set_do_not_cache(true);
    if (chance(40)) res->set_name("caf\xc3\xa9");
  }
  for (int i = static_cast<int>(rng() % 3); i > 0; --i) r.add_removed_resources(pick(rng, strings));
  if (chance(16)) r.set_nonce("caf\xc3\xa9");  // valid UTF-8, not ASCII: left to protobuf
  return r;
}

// Random cut points: none, a few, or one per byte.
std::vector<std::size_t> cut_points(std::mt19937& rng, std::size_t size) {
  std::vector<std::size_t> at;
  switch (rng() % 4) {
    case 0:
      break;
    case 1:
      for (std::size_t i = 1; i < size; ++i) at.push_back(i);
      break;
    default:
      for (std::size_t i = 0, n = rng() % 8; i < n; ++i) at.push_back(size == 0 ? 0 : rng() % size);
      std::sort(at.begin(), at.end());
      if (rng() % 2 == 0 && !at.empty()) at.push_back(at.back());  // an empty segment
      break;
  }
  return at;
}

// Appends an unknown field (field 15) of wire type `type` to `bytes`.
void add_unknown(std::string& bytes, int type) {
  bytes.push_back(static_cast<char>((15 << 3) | type));
  switch (type) {
    case 0:
      bytes += "\x96\x01";
      break;
    case 1:
      bytes += std::string(8, '\x01');
      break;
    case 2:
      bytes +=
          "\x03"
          "abc";
      break;
    case 5:
      bytes += std::string(4, '\x02');
      break;
    default:
      bytes += "\x08\x01\x7c";
      break;  // a group: varint field 1, then end group 15
  }
}

TEST(DecodedResponse, EqualsTheProtobufPathOnGeneratedResponses) {
  google::protobuf::LogSilencer silence;
  std::mt19937 rng(5);
  Checked counts;
  for (int i = 0; i < 4000; ++i) {
    std::string bytes = generated(rng).SerializeAsString();
    if (rng() % 4 == 0) add_unknown(bytes, static_cast<int>(rng() % 2 == 0 ? rng() % 3 : 5));
    check(bytes, cut(bytes, cut_points(rng, bytes.size())), counts, "response " + std::to_string(i));
    if (HasFatalFailure()) return;
  }
  // Not vacuous: most are read in place, and each declining rule was met.
  std::printf("generated: %d in place, %d declined\n", counts.in_place, counts.declined);
  EXPECT_GT(counts.in_place, 1500);
  EXPECT_GT(counts.declined, 500);
}

TEST(DecodedResponse, EqualsTheProtobufPathOnMutatedBytes) {
  google::protobuf::LogSilencer silence;
  std::mt19937 rng(13);
  Checked counts;
  for (int i = 0; i < 6000; ++i) {
    std::string bytes = generated(rng).SerializeAsString();
    const auto kind = rng() % 5;
    switch (kind) {
      case 0:  // truncated
      case 1:  // a few bytes changed
        test::damage(bytes, rng, kind == 0);
        break;
      case 2:  // two responses back to back: protobuf merges them (last string wins, lists append)
        bytes += generated(rng).SerializeAsString();
        break;
      case 3:  // an unknown field, a group or an invalid wire type at the top level
        add_unknown(bytes, static_cast<int>(rng() % 8));
        break;
      default: {  // a resource whose Any comes twice (merged) or a field twice (last wins)
        discovery::Resource res;
        res.set_name("Kubernetes//Pod/ns/twice");
        std::string body = res.SerializeAsString();
        discovery::Resource part;
        if (rng() % 2 == 0) {
          part.mutable_resource()->set_type_url(std::string(kAddressType));
        } else {
          part.mutable_resource()->set_value("payload");
        }
        body += part.SerializeAsString() + part.SerializeAsString();
        if (rng() % 2 == 0) body += res.SerializeAsString();
        bytes.push_back('\x12');
        for (std::size_t n = body.size();; n >>= 7) {
          bytes.push_back(static_cast<char>((n & 0x7f) | (n > 0x7f ? 0x80 : 0)));
          if (n <= 0x7f) break;
        }
        bytes += body;
        break;
      }
    }
    check(bytes, cut(bytes, cut_points(rng, bytes.size())), counts, "mutation " + std::to_string(i));
    if (HasFatalFailure()) return;
  }
  std::printf("mutated: %d in place, %d declined\n", counts.in_place, counts.declined);
  EXPECT_GT(counts.in_place, 1000);
  EXPECT_GT(counts.declined, 1000);
}

TEST(DecodedResponse, ViewsTheSegmentsAndCopiesOnlyWhatStraddles) {
  discovery::DeltaDiscoveryResponse r;
  r.set_type_url(std::string(kAddressType));
  r.set_nonce("n1");
  for (int i = 0; i < 100; ++i) {
    auto* res = r.add_resources();
    res->set_name("Kubernetes//Pod/ns/p" + std::to_string(i));
    res->mutable_resource()->set_type_url(std::string(kAddressType));
    res->mutable_resource()->set_value(std::string(200, 'w'));
  }
  std::string bytes = r.SerializeAsString();
  std::vector<std::string_view> segments;
  for (std::size_t at = 0; at < bytes.size(); at += 1024)
    segments.push_back(std::string_view(bytes).substr(at, 1024));
  auto decoded = DecodedResponse::decode(segments);
  ASSERT_TRUE(decoded);
  ASSERT_TRUE(decoded->in_place());
  ASSERT_EQ(decoded->view().resources.size(), 100u);
  // Resources of ~250 bytes in 1 KiB segments: a few straddle a boundary, the rest are views.
  std::size_t viewed = 0;
  for (const auto& res : decoded->view().resources) {
    const char* p = res.payload.data();
    viewed += p >= bytes.data() && p < bytes.data() + bytes.size();
  }
  EXPECT_GE(viewed, 70u);
  EXPECT_LT(viewed, 100u);
  EXPECT_GT(decoded->copied_bytes(), 0u);
  EXPECT_LT(decoded->copied_bytes(), bytes.size() / 3);
  expect_equal(decoded->view(), ResponseView::of(r), "1 KiB segments");
}

TEST(DecodedResponse, NamesWhatDoesNotParse) {
  std::string bytes =
      "\x12\x7f"
      "short";  // a resource claiming 127 bytes
  auto decoded = DecodedResponse::decode(bytes);
  ASSERT_FALSE(decoded);
  EXPECT_EQ(decoded.error().code, base::Errc::kProtocol);
  EXPECT_EQ(decoded.error().context, "DeltaDiscoveryResponse of 7 bytes does not parse");
  EXPECT_TRUE(DecodedResponse::decode(std::string_view()));  // empty: the empty response
}

}  // namespace
}  // namespace meshnode::xds
