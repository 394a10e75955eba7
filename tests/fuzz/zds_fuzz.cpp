// libFuzzer target for the ZDS request decoder (Istio ZDS protocol, research §2.2): the proxy parses
// every packet the node agent sends, so no byte sequence and no fd count may crash it, leak an fd or
// read out of bounds. Also exercises the agent-side Ack and hello decoders on the same bytes.
//
// Input layout: byte 0 selects how many fds travel with the packet (0..3, dup'ed /dev/null fds;
// decoding only counts them), the rest is the packet payload.
#include <fcntl.h>
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>

#include "nodeapi/zds.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using meshnode::nodeapi::Received;
  // Invalid UTF-8 in proto3 strings is logged by protobuf; keep the fuzzer's output readable.
  google::protobuf::LogSilencer silence;
  if (size == 0) return 0;
  Received packet;
  const unsigned fds = data[0] % 4;
  for (unsigned i = 0; i < fds; ++i) packet.fds.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  packet.bytes.assign(reinterpret_cast<const char*>(data + 1), size - 1);

  if (auto request = meshnode::nodeapi::decode_request(packet)) {
    // A request that passes validation keeps its promises.
    const bool is_add = request->has_add();
    if (is_add != (packet.fds.size() == 1)) __builtin_trap();
    if (is_add && !request->add().has_workload_info()) __builtin_trap();
    (void)meshnode::nodeapi::describe(*request);
  }
  (void)meshnode::nodeapi::decode_ack(packet);
  (void)meshnode::nodeapi::decode_hello(packet);
  return 0;
}
