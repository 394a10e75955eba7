#include "nodeapi/zds.hpp"

#include <utility>

namespace meshnode::nodeapi {
namespace {

using base::Errc;
using base::fail;
using base::Result;

std::string fd_count(std::size_t n) { return std::to_string(n) + (n == 1 ? " fd" : " fds"); }

/// Checks the fd rule of one payload: `add` needs exactly one fd, everything else none.
Result<void> check_fds(const zds::WorkloadRequest& request, std::size_t fds) {
  const bool is_add = request.payload_case() == zds::WorkloadRequest::kAdd;
  if (fds > 1)
    return fail(Errc::kProtocol, "zds: " + describe(request) + " carries " + fd_count(fds) + ", at most 1");
  if (is_add && fds == 0) return fail(Errc::kProtocol, "zds: " + describe(request) + " without a netns fd");
  if (!is_add && fds != 0) {
    return fail(Errc::kProtocol, "zds: " + describe(request) + " carries an fd; only add may");
  }
  return {};
}

Result<void> check_payload(const zds::WorkloadRequest& request) {
  switch (request.payload_case()) {
    case zds::WorkloadRequest::kAdd:
      if (request.add().uid().empty()) return fail(Errc::kProtocol, "zds: add with an empty uid");
      if (!request.add().has_workload_info()) {
        return fail(Errc::kProtocol, "zds: " + describe(request) + " without workload_info");
      }
      return {};
    case zds::WorkloadRequest::kKeep:
      if (request.keep().uid().empty()) return fail(Errc::kProtocol, "zds: keep with an empty uid");
      return {};
    case zds::WorkloadRequest::kDel:
      if (request.del().uid().empty()) return fail(Errc::kProtocol, "zds: del with an empty uid");
      return {};
    case zds::WorkloadRequest::kSnapshotSent:
      return {};
    case zds::WorkloadRequest::PAYLOAD_NOT_SET:
      break;
  }
  return fail(Errc::kProtocol, "zds: request with an empty or unknown payload");
}

Result<void> no_fds(const Received& packet, std::string_view what) {
  if (packet.fds.empty()) return {};
  return fail(Errc::kProtocol, "zds: " + std::string(what) + " carries " + fd_count(packet.fds.size()));
}

}  // namespace

std::string describe(const zds::WorkloadRequest& request) {
  switch (request.payload_case()) {
    case zds::WorkloadRequest::kAdd:
      return "add uid=" + request.add().uid();
    case zds::WorkloadRequest::kKeep:
      return "keep uid=" + request.keep().uid();
    case zds::WorkloadRequest::kDel:
      return "del uid=" + request.del().uid();
    case zds::WorkloadRequest::kSnapshotSent:
      return "snapshot_sent";
    case zds::WorkloadRequest::PAYLOAD_NOT_SET:
      break;
  }
  return "empty request";
}

Result<zds::WorkloadRequest> decode_request(const Received& packet) {
  zds::WorkloadRequest request;
  if (!request.ParseFromString(packet.bytes)) {
    return fail(Errc::kProtocol, "zds: malformed WorkloadRequest (" + std::to_string(packet.bytes.size()) +
                                     " bytes, " + fd_count(packet.fds.size()) + ")");
  }
  if (auto ok = check_payload(request); !ok) return std::unexpected(std::move(ok.error()));
  if (auto ok = check_fds(request, packet.fds.size()); !ok) return std::unexpected(std::move(ok.error()));
  return request;
}

Result<std::string> decode_ack(const Received& packet) {
  zds::WorkloadResponse response;
  if (!response.ParseFromString(packet.bytes))
    return fail(Errc::kProtocol, "zds: malformed WorkloadResponse");
  if (auto ok = no_fds(packet, "ack"); !ok) return std::unexpected(std::move(ok.error()));
  if (!response.has_ack()) return fail(Errc::kProtocol, "zds: response without an ack");
  return std::move(*response.mutable_ack()->mutable_error());
}

Result<zds::Version> decode_hello(const Received& packet) {
  zds::ZdsHello hello;
  if (!hello.ParseFromString(packet.bytes)) return fail(Errc::kProtocol, "zds: malformed ZdsHello");
  if (auto ok = no_fds(packet, "hello"); !ok) return std::unexpected(std::move(ok.error()));
  return hello.version();
}

Result<void> send_hello(int fd) {
  zds::ZdsHello hello;
  hello.set_version(zds::V1);
  return send_message(fd, hello);
}

Result<void> send_ack(int fd, std::string error) {
  zds::WorkloadResponse response;
  response.mutable_ack()->set_error(std::move(error));
  return send_message(fd, response);
}

Result<Request> recv_request(int fd, std::size_t max_size) {
  auto packet = recv_message(fd, max_size);
  if (!packet) return std::unexpected(std::move(packet.error()));
  auto message = decode_request(*packet);
  if (!message) return std::unexpected(std::move(message.error()));
  Request out{std::move(*message), {}};
  if (!packet->fds.empty()) out.netns = std::move(packet->fds.front());
  return out;
}

Result<zds::Version> recv_hello(int fd) {
  auto packet = recv_message(fd);
  if (!packet) return std::unexpected(std::move(packet.error()));
  return decode_hello(*packet);
}

Result<void> send_add(int fd, std::string_view uid, const zds::WorkloadInfo& info, int netns_fd) {
  if (netns_fd < 0)
    return fail(Errc::kInvalidArgument, "zds: add uid=" + std::string(uid) + " without a netns fd");
  zds::WorkloadRequest request;
  auto* add = request.mutable_add();
  add->set_uid(std::string(uid));
  *add->mutable_workload_info() = info;
  return send_message(fd, request, netns_fd);
}

Result<void> send_keep(int fd, std::string_view uid) {
  zds::WorkloadRequest request;
  request.mutable_keep()->set_uid(std::string(uid));
  return send_message(fd, request);
}

Result<void> send_del(int fd, std::string_view uid) {
  zds::WorkloadRequest request;
  request.mutable_del()->set_uid(std::string(uid));
  return send_message(fd, request);
}

Result<void> send_snapshot_sent(int fd) {
  zds::WorkloadRequest request;
  request.mutable_snapshot_sent();
  return send_message(fd, request);
}

Result<std::string> recv_ack(int fd) {
  auto packet = recv_message(fd);
  if (!packet) return std::unexpected(std::move(packet.error()));
  return decode_ack(*packet);
}

}  // namespace meshnode::nodeapi
