#include "nodeapi/zds.hpp"

#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "unit/nodeapi/test_util.hpp"

namespace meshnode::nodeapi {
namespace {

using base::Errc;
using testing::inode_of;
using testing::is_cloexec;
using testing::open_fd_count;
using testing::open_own_netns;
using testing::seqpacket_pair;

zds::WorkloadInfo sample_info() {
  zds::WorkloadInfo info;
  info.set_name("n");
  info.set_namespace_("ns");
  info.set_service_account("sa");
  return info;
}

std::string bytes(std::initializer_list<std::uint8_t> b) { return std::string(b.begin(), b.end()); }

// ---- wire contract: field numbers pinned by hand-encoded bytes (research §2.2) -------------------

TEST(ZdsWire, EncodingsMatchTheContract) {
  zds::ZdsHello hello;
  hello.set_version(zds::V1);
  EXPECT_EQ(hello.SerializeAsString(), bytes({0x08, 0x01}));

  zds::WorkloadRequest keep;
  keep.mutable_keep()->set_uid("u");
  EXPECT_EQ(keep.SerializeAsString(), bytes({0x2a, 0x03, 0x0a, 0x01, 'u'}));

  // DelWorkload carries its uid in field 2.
  zds::WorkloadRequest del;
  del.mutable_del()->set_uid("u");
  EXPECT_EQ(del.SerializeAsString(), bytes({0x12, 0x03, 0x12, 0x01, 'u'}));

  zds::WorkloadRequest snapshot;
  snapshot.mutable_snapshot_sent();
  EXPECT_EQ(snapshot.SerializeAsString(), bytes({0x1a, 0x00}));

  zds::WorkloadRequest add;
  add.mutable_add()->set_uid("u");
  *add.mutable_add()->mutable_workload_info() = sample_info();
  EXPECT_EQ(add.SerializeAsString(), bytes({0x0a, 0x10,               // add = 1
                                            0x0a, 0x01, 'u',          // uid = 1
                                            0x12, 0x0b,               // workload_info = 2
                                            0x0a, 0x01, 'n',          // name = 1
                                            0x12, 0x02, 'n', 's',     // namespace = 2
                                            0x1a, 0x02, 's', 'a'}));  // service_account = 3

  zds::WorkloadResponse ack;
  ack.mutable_ack()->set_error("e");
  EXPECT_EQ(ack.SerializeAsString(), bytes({0x0a, 0x03, 0x0a, 0x01, 'e'}));
  zds::WorkloadResponse ok;
  ok.mutable_ack();
  EXPECT_EQ(ok.SerializeAsString(), bytes({0x0a, 0x00}));
}

// ---- round trips over a real SOCK_SEQPACKET pair ------------------------------------------------

TEST(ZdsCodec, HelloRoundTrip) {
  auto pair = seqpacket_pair();
  ASSERT_TRUE(send_hello(pair.a.get()));
  auto version = recv_hello(pair.b.get());
  ASSERT_TRUE(version) << version.error().message();
  EXPECT_EQ(*version, zds::V1);
}

TEST(ZdsCodec, AckRoundTrip) {
  auto pair = seqpacket_pair();
  ASSERT_TRUE(send_ack(pair.a.get(), ""));
  ASSERT_TRUE(send_ack(pair.a.get(), "failure to start proxy: address in use"));
  auto ok = recv_ack(pair.b.get());
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(*ok, "");
  auto nack = recv_ack(pair.b.get());
  ASSERT_TRUE(nack) << nack.error().message();
  EXPECT_EQ(*nack, "failure to start proxy: address in use");
}

TEST(ZdsCodec, AddRoundTripCarriesTheNetns) {
  auto pair = seqpacket_pair();
  auto netns = open_own_netns();
  ASSERT_TRUE(send_add(pair.a.get(), "uid-1", sample_info(), netns.get()));

  auto request = recv_request(pair.b.get());
  ASSERT_TRUE(request) << request.error().message();
  ASSERT_TRUE(request->message.has_add());
  EXPECT_EQ(request->message.add().uid(), "uid-1");
  EXPECT_EQ(request->message.add().workload_info().name(), "n");
  EXPECT_EQ(request->message.add().workload_info().namespace_(), "ns");
  EXPECT_EQ(request->message.add().workload_info().service_account(), "sa");
  ASSERT_TRUE(request->netns.valid());
  EXPECT_EQ(inode_of(request->netns.get()), inode_of(netns.get()));
  EXPECT_TRUE(is_cloexec(request->netns.get()));
  EXPECT_EQ(describe(request->message), "add uid=uid-1");
}

TEST(ZdsCodec, KeepDelSnapshotRoundTrip) {
  auto pair = seqpacket_pair();
  ASSERT_TRUE(send_keep(pair.a.get(), "uid-k"));
  ASSERT_TRUE(send_del(pair.a.get(), "uid-d"));
  ASSERT_TRUE(send_snapshot_sent(pair.a.get()));

  auto keep = recv_request(pair.b.get());
  ASSERT_TRUE(keep) << keep.error().message();
  EXPECT_EQ(keep->message.keep().uid(), "uid-k");
  EXPECT_FALSE(keep->netns.valid());
  auto del = recv_request(pair.b.get());
  ASSERT_TRUE(del) << del.error().message();
  EXPECT_EQ(del->message.del().uid(), "uid-d");
  EXPECT_FALSE(del->netns.valid());
  auto snapshot = recv_request(pair.b.get());
  ASSERT_TRUE(snapshot) << snapshot.error().message();
  EXPECT_TRUE(snapshot->message.has_snapshot_sent());
  EXPECT_EQ(describe(snapshot->message), "snapshot_sent");
}

TEST(ZdsCodec, SendAddRefusesAMissingFd) {
  auto pair = seqpacket_pair();
  auto sent = send_add(pair.a.get(), "uid-1", sample_info(), -1);
  ASSERT_FALSE(sent);
  EXPECT_EQ(sent.error().code, Errc::kInvalidArgument);
}

// ---- validation: each broken rule has its own error, and no received fd survives ----------------

std::string request_bytes(auto&& build) {
  zds::WorkloadRequest r;
  build(r);
  return r.SerializeAsString();
}

struct BadRequestCase {
  const char* name;
  std::string bytes;
  int fds;               // how many netns fds travel with the packet
  const char* expected;  // substring of the error context
};

std::vector<BadRequestCase> bad_request_cases() {
  google::protobuf::LogSilencer silence;  // the invalid-UTF-8 case is logged when serialized
  const auto add_with_info = request_bytes([](auto& r) {
    r.mutable_add()->set_uid("u");
    *r.mutable_add()->mutable_workload_info() = sample_info();
  });
  return {
      {"malformed_length", bytes({0x0a, 0xff, 0xff}), 0, "malformed WorkloadRequest"},
      {"malformed_with_fd", bytes({0x0a, 0x05, 0x01}), 1, "malformed WorkloadRequest"},
      {"invalid_utf8_uid", request_bytes([](auto& r) { r.mutable_keep()->set_uid("\xff\xfe"); }), 0,
       "malformed"},
      {"fd_on_keep", request_bytes([](auto& r) { r.mutable_keep()->set_uid("u"); }), 1,
       "keep uid=u carries an fd"},
      {"fd_on_del", request_bytes([](auto& r) { r.mutable_del()->set_uid("u"); }), 1,
       "del uid=u carries an fd"},
      {"fd_on_snapshot", request_bytes([](auto& r) { r.mutable_snapshot_sent(); }), 1,
       "snapshot_sent carries an fd"},
      {"add_without_fd", add_with_info, 0, "add uid=u without a netns fd"},
      {"add_two_fds", add_with_info, 2, "add uid=u carries 2 fds"},
      {"keep_two_fds", request_bytes([](auto& r) { r.mutable_keep()->set_uid("u"); }), 2, "carries 2 fds"},
      {"add_without_info", request_bytes([](auto& r) { r.mutable_add()->set_uid("u"); }), 1,
       "without workload_info"},
      {"add_empty_uid",
       request_bytes([](auto& r) { *r.mutable_add()->mutable_workload_info() = sample_info(); }), 1,
       "add with an empty uid"},
      {"keep_empty_uid", request_bytes([](auto& r) { r.mutable_keep(); }), 0, "keep with an empty uid"},
      {"del_empty_uid", request_bytes([](auto& r) { r.mutable_del(); }), 0, "del with an empty uid"},
      {"empty_payload_with_fd", "", 1, "empty or unknown payload"},
      {"unknown_field_4", bytes({0x22, 0x00}), 0, "empty or unknown payload"},
      {"unknown_field_6", bytes({0x32, 0x00}), 1, "empty or unknown payload"},
      {"add_as_varint", bytes({0x08, 0x01}), 1, "empty or unknown payload"},
  };
}

class ZdsBadRequest : public ::testing::TestWithParam<BadRequestCase> {};

TEST_P(ZdsBadRequest, IsProtocolErrorAndLeaksNoFd) {
  google::protobuf::LogSilencer silence;  // ...and when parsed
  const auto& c = GetParam();
  auto pair = seqpacket_pair();
  const auto before = open_fd_count();
  {
    std::vector<base::UniqueFd> netns;
    std::vector<int> raw;
    for (int i = 0; i < c.fds; ++i) {
      netns.push_back(open_own_netns());
      raw.push_back(netns.back().get());
    }
    ASSERT_TRUE(send_packet(pair.a.get(), c.bytes, raw));
  }
  {
    auto packet = recv_message(pair.b.get());
    ASSERT_TRUE(packet) << packet.error().message();
    ASSERT_EQ(packet->fds.size(), static_cast<std::size_t>(c.fds));
    auto decoded = decode_request(*packet);
    ASSERT_FALSE(decoded) << describe(*decoded);
    EXPECT_EQ(decoded.error().code, Errc::kProtocol);
    EXPECT_NE(decoded.error().context.find(c.expected), std::string::npos) << decoded.error().message();
  }
  // recv_request (the proxy's path) rejects the same packet and closes its fds itself.
  {
    std::vector<base::UniqueFd> netns;
    std::vector<int> raw;
    for (int i = 0; i < c.fds; ++i) {
      netns.push_back(open_own_netns());
      raw.push_back(netns.back().get());
    }
    ASSERT_TRUE(send_packet(pair.a.get(), c.bytes, raw));
  }
  auto request = recv_request(pair.b.get());
  ASSERT_FALSE(request);
  EXPECT_EQ(request.error().code, Errc::kProtocol);
  EXPECT_EQ(open_fd_count(), before);
}

INSTANTIATE_TEST_SUITE_P(Cases, ZdsBadRequest, ::testing::ValuesIn(bad_request_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ZdsCodec, AckAndHelloRejectFdsAndGarbage) {
  auto pair = seqpacket_pair();
  const auto before = open_fd_count();
  {
    auto netns = open_own_netns();
    zds::WorkloadResponse ack;
    ack.mutable_ack();
    ASSERT_TRUE(send_message(pair.a.get(), ack, netns.get()));
    zds::ZdsHello hello;
    hello.set_version(zds::V1);
    ASSERT_TRUE(send_message(pair.a.get(), hello, netns.get()));
  }
  auto ack = recv_ack(pair.b.get());
  ASSERT_FALSE(ack);
  EXPECT_NE(ack.error().context.find("ack carries 1 fd"), std::string::npos) << ack.error().message();
  auto hello = recv_hello(pair.b.get());
  ASSERT_FALSE(hello);
  EXPECT_NE(hello.error().context.find("hello carries 1 fd"), std::string::npos) << hello.error().message();
  EXPECT_EQ(open_fd_count(), before);

  auto no_ack = decode_ack(Received{bytes({0x12, 0x00}), {}});
  ASSERT_FALSE(no_ack);
  EXPECT_NE(no_ack.error().context.find("without an ack"), std::string::npos);
  auto bad_ack = decode_ack(Received{bytes({0x0a, 0x7f}), {}});
  ASSERT_FALSE(bad_ack);
  EXPECT_EQ(bad_ack.error().code, Errc::kProtocol);
  auto bad_hello = decode_hello(Received{bytes({0x08}), {}});
  ASSERT_FALSE(bad_hello);
  EXPECT_EQ(bad_hello.error().code, Errc::kProtocol);
}

// ---- random input: every frame is an error, nothing crashes -------------------------------------

TEST(ZdsCodec, RandomFramesOverTheSocketAreErrors) {
  google::protobuf::LogSilencer silence;  // random strings are invalid UTF-8; protobuf would log each
  std::mt19937 rng(20240603);             // fixed seed: reproducible frames
  auto pair = seqpacket_pair();
  const auto before = open_fd_count();
  for (int i = 0; i < 20; ++i) {
    std::string frame(1 + rng() % 200, '\0');
    for (auto& ch : frame) ch = static_cast<char>(rng() & 0xff);
    // Random frames with the netns fd attached to every other one: even a frame that happens to
    // parse is then an fd on a non-Add or an Add without WorkloadInfo/fd.
    auto netns = open_own_netns();
    ASSERT_TRUE(
        send_packet(pair.a.get(), frame, i % 2 == 0 ? std::vector<int>{netns.get()} : std::vector<int>{}));
    netns.reset();
    auto request = recv_request(pair.b.get());
    EXPECT_FALSE(request) << "frame " << i << " decoded as " << describe(request->message);
    if (!request) {
      EXPECT_EQ(request.error().code, Errc::kProtocol) << request.error().message();
    }
  }
  EXPECT_EQ(open_fd_count(), before);
}

TEST(ZdsCodec, ManyRandomBuffersNeverCrash) {
  google::protobuf::LogSilencer silence;
  std::mt19937 rng(7);
  int decoded = 0;
  for (int i = 0; i < 5000; ++i) {
    Received packet;
    packet.bytes.resize(rng() % 64);
    for (auto& ch : packet.bytes) ch = static_cast<char>(rng() & 0xff);
    // Bias toward valid tags so the parser gets past the first byte often.
    if (!packet.bytes.empty()) packet.bytes[0] = "\x0a\x12\x1a\x2a"[rng() % 4];
    if (decode_request(packet)) ++decoded;
    (void)decode_ack(packet);
    (void)decode_hello(packet);
  }
  // Nothing to assert on the count beyond "ran"; the check is that ASan/UBSan stayed quiet.
  SUCCEED() << decoded << " random buffers happened to decode";
}

}  // namespace
}  // namespace meshnode::nodeapi
