// libFuzzer target for ZDS as the proxy receives it (Istio ZDS protocol, research §2.2): one
// SOCK_SEQPACKET packet from the node agent, with SCM_RIGHTS fds, through the real socket path
// (send_packet → recv_request) and the pure decoders. No byte sequence and no fd count may crash the
// proxy, leak an fd or read out of bounds, and every accepted request keeps the documented rules.
//
// Input layout: byte 0 is the envelope — bits 0-2: fds attached (0..4, or 9 when 5..7: more than
// kMaxFdsPerPacket, so the kernel truncates the control data); bit 3: receive with a 16-byte cap
// instead of kDefaultMaxPacket (the truncation path). The rest is the packet payload.
#include <fcntl.h>
#include <google/protobuf/stubs/logging.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "base/unique_fd.hpp"
#include "fuzz_check.hpp"
#include "nodeapi/zds.hpp"

namespace {

using meshnode::base::UniqueFd;
namespace nodeapi = meshnode::nodeapi;
namespace zds = meshnode::nodeapi::zds;

/// The lowest free fd number: it moves up iff an iteration leaked a descriptor.
int lowest_free_fd() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ::close(fd);
  return fd;
}

/// The promises decode_request documents for what it accepts (zds.hpp).
void check_request(const zds::WorkloadRequest& request, bool has_netns) {
  using R = zds::WorkloadRequest;
  FUZZ_CHECK((request.payload_case() == R::kAdd) == has_netns, "only add carries its netns fd");
  switch (request.payload_case()) {
    case R::kAdd:
      FUZZ_CHECK(!request.add().uid().empty() && request.add().has_workload_info(), "add without uid/info");
      break;
    case R::kKeep:
      FUZZ_CHECK(!request.keep().uid().empty(), "keep without uid");
      break;
    case R::kDel:
      FUZZ_CHECK(!request.del().uid().empty(), "del without uid");
      break;
    case R::kSnapshotSent:
      break;
    case R::PAYLOAD_NOT_SET:
      FUZZ_CHECK(false, "accepted an empty payload");
  }
  FUZZ_CHECK(!nodeapi::describe(request).empty(), "describe is empty");
  // What the proxy accepted, re-sent by a faithful agent, decodes to the same message.
  const std::string wire = request.SerializeAsString();
  zds::WorkloadRequest again;
  FUZZ_CHECK(again.ParseFromString(wire) && again.SerializeAsString() == wire, "round trip differs");
}

/// The socket path: what recv_request returns for the packet, or nothing when it refused it.
void fuzz_socket(std::string_view payload, const std::vector<int>& fds, std::size_t max_size) {
  int pair[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) == 0, "socketpair");
  UniqueFd agent(pair[0]), proxy(pair[1]);
  if (!nodeapi::send_packet(agent.get(), payload, fds)) return;  // e.g. larger than the socket buffer
  auto request = nodeapi::recv_request(proxy.get(), max_size);
  if (!request) return;
  FUZZ_CHECK(payload.size() <= max_size, "accepted a packet over the cap");
  check_request(request->message, static_cast<bool>(request->netns));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Invalid UTF-8 in proto3 strings is logged by protobuf; keep the fuzzer's output readable.
  google::protobuf::LogSilencer silence;
  static const int baseline_fd = lowest_free_fd();
  if (size == 0) return 0;
  const unsigned fd_bits = data[0] & 7u;
  const std::size_t fd_count = fd_bits <= 4 ? fd_bits : nodeapi::kMaxFdsPerPacket + 1;
  const std::size_t max_size = (data[0] & 8u) != 0 ? 16 : nodeapi::kDefaultMaxPacket;
  const std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
  {
    const UniqueFd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    const std::vector<int> fds(fd_count, devnull.get());
    fuzz_socket(payload, fds, max_size);

    // The pure decoders on the same bytes, as the agent (ack, hello) and the proxy (request) use them.
    nodeapi::Received packet{std::string(payload), {}};
    for (std::size_t i = 0; i < fd_count; ++i) packet.fds.emplace_back(::dup(devnull.get()));
    if (auto request = nodeapi::decode_request(packet)) check_request(*request, packet.fds.size() == 1);
    if (auto ack = nodeapi::decode_ack(packet)) FUZZ_CHECK(packet.fds.empty(), "ack with fds accepted");
    if (auto hello = nodeapi::decode_hello(packet)) FUZZ_CHECK(packet.fds.empty(), "hello with fds accepted");
  }
  FUZZ_CHECK(lowest_free_fd() == baseline_fd, "an fd leaked");
  return 0;
}
