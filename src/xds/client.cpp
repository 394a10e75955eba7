#include "xds/client.hpp"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <mutex>
#include <set>

#include "discovery.pb.h"
#include "rpc/channel.hpp"
#include "rpc/loop.hpp"
#include "xds/convert.hpp"
#include "xds/response.hpp"
#include "xds/store.hpp"

namespace meshnode::xds {
namespace {

using base::Errc;
using base::fail;
namespace discovery = envoy::service::discovery::v3;
using Request = discovery::DeltaDiscoveryRequest;
// Responses arrive as raw bytes and are read in place (DecodedResponse): the initial push of a
// large cluster is tens of MB, and a generated stub would copy every payload into a message first.
using Stub = grpc::TemplatedGenericStub<Request, grpc::ByteBuffer>;
constexpr const char* kDeltaMethod =
    "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources";
using Clock = std::chrono::steady_clock;

constexpr int kInvalidArgument = 3;  // google.rpc.Code.INVALID_ARGUMENT in a NACK's error_detail

std::string env_or(const rpc::Env& env, std::string_view name, std::string fallback) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? fallback : it->second;
}

// Why a stream ended, as istio_xds_connection_terminations_total{reason} names it, and whether the
// next attempt waits for the growing backoff.
struct Termination {
  const char* reason;
  bool backoff;
};

Termination classify(const grpc::Status& status, bool got_response) {
  if (status.ok()) return {"Complete", false};
  const std::string& m = status.error_message();
  bool benign = status.error_code() == grpc::StatusCode::CANCELLED ||
                status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
                 (m.find("transport is closing") != std::string::npos ||
                  m.find("received prior goaway") != std::string::npos));
  if (benign && got_response) return {"Reconnect", false};
  if (!got_response) return {"ConnectionError", true};
  return {"Error", true};
}

}  // namespace

XdsMetrics::~XdsMetrics() = default;

std::string NodeInfo::id() const {
  return "ztunnel~" + instance_ip + "~" + pod_name + "." + pod_namespace + "~" + pod_namespace +
         ".svc.cluster.local";
}

Result<std::optional<XdsOptions>> XdsOptions::from_env(const rpc::Env& env) {
  auto endpoint = rpc::endpoint_from_env(env, "XDS");
  if (!endpoint) return std::unexpected(endpoint.error());
  if (!*endpoint) return std::optional<XdsOptions>{};
  XdsOptions o;
  o.endpoint = std::move(**endpoint);
  std::string on_demand = env_or(env, "XDS_ON_DEMAND", "false");
  if (on_demand != "true" && on_demand != "false") {
    return fail(Errc::kConfig, "XDS_ON_DEMAND='" + on_demand + "': expected true or false");
  }
  o.on_demand = on_demand == "true";
  o.node.instance_ip = env_or(env, "INSTANCE_IP", "1.1.1.1");
  o.node.pod_name = env_or(env, "POD_NAME", "");
  o.node.pod_namespace = env_or(env, "POD_NAMESPACE", "");
  o.node.node_name = env_or(env, "NODE_NAME", "");
  for (const auto& [name, value] : env) {
    if (name.starts_with("ISTIO_METAJSON_")) {
      google::protobuf::Value parsed;
      if (!google::protobuf::util::JsonStringToMessage(value, &parsed).ok()) {
        return fail(Errc::kConfig, name + " is not valid JSON");
      }
      o.node.json_metadata.emplace(name.substr(15), value);
    } else if (name.starts_with("ISTIO_META_")) {
      o.node.metadata.emplace(name.substr(11), value);
    }
  }
  return std::optional<XdsOptions>(std::move(o));
}

struct XdsClient::Impl {
  struct Stream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientAsyncReaderWriter<Request, grpc::ByteBuffer>> rw;
    grpc::ByteBuffer incoming;
    std::string decode_error;  // set when a response did not decode: the stream is then cancelled
    std::deque<Request> outbox;  // front() is being written while `writing`
    bool writing = false;
    bool open = false;
    bool finishing = false;
    bool got_response = false;
    grpc::Status status;
  };
  struct Waiter {
    std::uint64_t id;
    std::function<void(Result<SnapshotPtr>)> done;
    rpc::CompletionLoop::TimerId timer;
    Clock::time_point started;
  };

  Impl(XdsOptions o, ResourceStore s, SnapshotPtr initial, XdsCallbacks c, XdsMetrics* m)
      : options(std::move(o)),
        callbacks(std::move(c)),
        metrics(m),
        store(std::move(s)),
        current(std::move(initial)),
        backoff(options.initial_backoff) {
    status.address = options.endpoint.address;
    status.types = {XdsTypeStatus{.type_url = std::string(kAddressType)},
                    XdsTypeStatus{.type_url = std::string(kAuthorizationType)}};
  }

  // ---- loop thread ----
  void connect();
  void on_started(const std::shared_ptr<Stream>& s, bool ok);
  void read(const std::shared_ptr<Stream>& s);
  void on_read(const std::shared_ptr<Stream>& s, bool ok);
  void finish(const std::shared_ptr<Stream>& s);
  void on_finished(const std::shared_ptr<Stream>& s);
  void send(const std::shared_ptr<Stream>& s, Request request);
  void write_next(const std::shared_ptr<Stream>& s);
  void send_initial(const std::shared_ptr<Stream>& s);
  void handle(const std::shared_ptr<Stream>& s, const ResponseView& response, std::size_t bytes);
  void resolve_waiters(const ResponseView& response, const ApplyOutcome& outcome);
  void add_waiter(std::string key, Clock::time_point deadline, std::function<void(Result<SnapshotPtr>)> done);
  void complete(std::function<void(Result<SnapshotPtr>)> done, Result<SnapshotPtr> result);
  void deliver(std::function<void()> fn);
  void record_response(const ResponseView& response, const std::string& error);
  [[nodiscard]] discovery::Node node() const;

  XdsOptions options;
  XdsCallbacks callbacks;
  XdsMetrics* metrics;
  ResourceStore store;
  SnapshotPtr current;
  SnapshotPtr initial;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<Stub> stub;

  bool stopping = false;
  std::shared_ptr<Stream> stream;
  std::chrono::milliseconds backoff;
  rpc::CompletionLoop::TimerId reconnect_timer = 0;
  std::set<std::string> demanded;          // on-demand names subscribed on every stream
  std::set<std::string> answered_missing;  // demanded names the server said do not exist
  std::map<std::string, std::vector<Waiter>> waiters;
  std::uint64_t next_waiter = 1;
  std::set<std::string> seen_types;
  bool ready_sent = false;

  mutable std::mutex status_mu;
  XdsStatus status;  // guarded by status_mu

  // Last member: its thread stops (and drains every handler above) before the rest is destroyed.
  rpc::CompletionLoop loop{"xds"};
};

discovery::Node XdsClient::Impl::node() const {
  discovery::Node n;
  const NodeInfo& info = options.node;
  n.set_id(info.id());
  auto& fields = *n.mutable_metadata()->mutable_fields();
  fields["NAME"].set_string_value(info.pod_name);
  fields["NAMESPACE"].set_string_value(info.pod_namespace);
  fields["INSTANCE_IPS"].set_string_value(info.instance_ip);
  fields["NODE_NAME"].set_string_value(info.node_name);
  for (const auto& [k, v] : info.metadata) fields[k].set_string_value(v);
  for (const auto& [k, json] : info.json_metadata) {
    (void)google::protobuf::util::JsonStringToMessage(json, &fields[k]);  // validated in from_env
  }
  return n;
}

void XdsClient::Impl::deliver(std::function<void()> fn) {
  if (callbacks.post) {
    callbacks.post(std::move(fn));
  } else {
    fn();
  }
}

void XdsClient::Impl::connect() {
  reconnect_timer = 0;
  if (stopping) return;
  auto s = std::make_shared<Stream>();
  {
    std::lock_guard lock(status_mu);
    ++status.streams;
  }
  if (auto md = rpc::add_metadata(s->context, options.endpoint); !md) {
    spdlog::error("xds: cannot build call metadata: {}", md.error().message());
    s->status = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, md.error().message());
    on_finished(s);
    return;
  }
  s->rw = stub->PrepareCall(&s->context, kDeltaMethod, loop.cq());
  stream = s;
  s->rw->StartCall(loop.tag([this, s](bool ok) { on_started(s, ok); }));
}

void XdsClient::Impl::on_started(const std::shared_ptr<Stream>& s, bool ok) {
  if (stopping) return;  // after stop() no operation may start: the queue is shutting down
  if (!ok) return finish(s);
  s->open = true;
  send_initial(s);
  read(s);
}

void XdsClient::Impl::send_initial(const std::shared_ptr<Stream>& s) {
  for (std::string_view type : {kAddressType, kAuthorizationType}) {
    Request r;
    *r.mutable_node() = node();
    r.set_type_url(std::string(type));
    if (type == kAddressType && options.on_demand) {
      // "Subscribe to nothing" (research §2.3), then every name asked for so far.
      r.add_resource_names_subscribe("*");
      r.add_resource_names_unsubscribe("*");
      for (const auto& name : demanded) r.add_resource_names_subscribe(name);
    }
    for (auto& [name, version] : store.versions(type))
      (*r.mutable_initial_resource_versions())[name] = version;
    send(s, std::move(r));
  }
}

void XdsClient::Impl::read(const std::shared_ptr<Stream>& s) {
  s->rw->Read(&s->incoming, loop.tag([this, s](bool ok) { on_read(s, ok); }));
}

void XdsClient::Impl::on_read(const std::shared_ptr<Stream>& s, bool ok) {
  if (stopping) return;
  if (!ok) return finish(s);
  // gRPC hands a message over as a chain of slices (about one per HTTP/2 DATA frame, decompressed
  // already); the response is read across them, not joined first.
  std::vector<grpc::Slice> slices;
  if (!s->incoming.Dump(&slices).ok()) slices.clear();  // an empty message: the empty response
  s->incoming.Clear();                                  // the slices hold their own references
  std::vector<std::string_view> segments;
  segments.reserve(slices.size());
  std::size_t bytes = 0;
  for (const auto& slice : slices) {
    segments.emplace_back(reinterpret_cast<const char*>(slice.begin()), slice.size());
    bytes += slice.size();
  }
  auto decoded = DecodedResponse::decode(segments);
  if (!decoded) {
    // Not a response we can ACK or NACK (no nonce to name): end the stream, reconnect with backoff.
    s->decode_error = decoded.error().context;
    spdlog::error("xds: response from {} does not decode: {}; reconnecting", options.endpoint.address,
                  s->decode_error);
    s->context.TryCancel();
    return finish(s);
  }
  // Connected once a response decodes: a server that only sends garbage keeps the backoff growing.
  if (!s->got_response) {
    s->got_response = true;
    backoff = options.initial_backoff;
    std::lock_guard lock(status_mu);
    status.connected = true;
    spdlog::info("xds: connected to {}", options.endpoint.address);
  }
  handle(s, decoded->view(), bytes);
  read(s);
}

void XdsClient::Impl::finish(const std::shared_ptr<Stream>& s) {
  if (s->finishing || stopping) return;
  s->finishing = true;
  s->rw->Finish(&s->status, loop.tag([this, s](bool) { on_finished(s); }));
}

void XdsClient::Impl::on_finished(const std::shared_ptr<Stream>& s) {
  if (stream == s) stream.reset();
  Termination t = s->decode_error.empty() ? classify(s->status, s->got_response) : Termination{"Error", true};
  std::string why = s->decode_error.empty() ? std::to_string(static_cast<int>(s->status.error_code())) + " " +
                                                  s->status.error_message()
                                            : s->decode_error;
  {
    std::lock_guard lock(status_mu);
    status.connected = false;
    status.last_error = why;
  }
  if (stopping) return;
  if (metrics) metrics->connection_terminated(t.reason);
  std::chrono::milliseconds delay =
      t.backoff ? backoff : (s->status.ok() ? std::chrono::milliseconds(0) : options.initial_backoff);
  if (t.backoff) backoff = std::min(backoff * 2, options.max_backoff);
  spdlog::warn("xds: stream to {} ended reason={} status=\"{}\" retry_in_ms={}", options.endpoint.address,
               t.reason, why, delay.count());
  reconnect_timer = loop.schedule(Clock::now() + delay, [this] { connect(); });
}

void XdsClient::Impl::send(const std::shared_ptr<Stream>& s, Request request) {
  s->outbox.push_back(std::move(request));
  if (!s->writing) write_next(s);
}

void XdsClient::Impl::write_next(const std::shared_ptr<Stream>& s) {
  if (s->outbox.empty() || s->finishing || stopping) {
    s->writing = false;
    return;
  }
  s->writing = true;
  s->rw->Write(s->outbox.front(), loop.tag([this, s](bool ok) {
    s->outbox.pop_front();
    if (!ok) {
      s->writing = false;  // the read side sees the failure and finishes the stream
      return;
    }
    write_next(s);
  }));
}

void XdsClient::Impl::handle(const std::shared_ptr<Stream>& s, const ResponseView& response,
                             std::size_t bytes) {
  if (metrics) metrics->message_received(response.type_url, bytes);
  ApplyOutcome outcome = store.apply(response);
  std::string error;
  if (outcome.unknown_type) {
    error = "unknown type_url '" + std::string(response.type_url) + "'";
  } else if (outcome.changed()) {
    auto built = store.build();
    if (built) {
      current = *built;
      if (callbacks.on_snapshot) deliver([cb = callbacks.on_snapshot, snap = current] { cb(snap); });
    } else {
      // A bug, not the server's fault: keep serving the previous snapshot and say so.
      outcome.rejected.push_back({"(snapshot)", built.error().context});
    }
  }
  if (error.empty()) error = outcome.error_message();
  Request ack;
  ack.set_type_url(std::string(response.type_url));
  ack.set_response_nonce(std::string(response.nonce));
  if (!error.empty()) {
    ack.mutable_error_detail()->set_code(kInvalidArgument);
    ack.mutable_error_detail()->set_message(error);
    spdlog::warn("xds: NACK type={} nonce={} applied={} removed={} rejected={} error=\"{}\"",
                 response.type_url, response.nonce, outcome.upserted, outcome.removed,
                 outcome.rejected.size(), error);
  } else {
    spdlog::debug("xds: ACK type={} nonce={} applied={} removed={}", response.type_url, response.nonce,
                  outcome.upserted, outcome.removed);
  }
  if (!outcome.unknown_type) seen_types.insert(std::string(response.type_url));
  bool ready = seen_types.contains(std::string(kAuthorizationType)) &&
               (options.on_demand || seen_types.contains(std::string(kAddressType)));
  bool became_ready = ready && !ready_sent;
  ready_sent = ready_sent || ready;
  // Status first: whoever sees our ACK/NACK may look at /config_dump right away.
  record_response(response, error);
  send(s, std::move(ack));
  if (became_ready) {
    spdlog::info("xds: first response of each type applied; ready");
    if (callbacks.on_ready) deliver(callbacks.on_ready);
  }
  if (!waiters.empty() && response.type_url == kAddressType) resolve_waiters(response, outcome);
}

void XdsClient::Impl::record_response(const ResponseView& response, const std::string& error) {
  std::lock_guard lock(status_mu);
  status.ready = ready_sent;
  for (auto& t : status.types) {
    if (t.type_url != response.type_url) continue;
    t.received = true;
    t.system_version_info = response.system_version_info;
    t.last_nonce = response.nonce;
    t.resources =
        t.type_url == kAddressType ? store.workload_count() + store.service_count() : store.policy_count();
    if (error.empty()) {
      t.last_ack_nonce = response.nonce;
    } else {
      t.last_nack_nonce = response.nonce;
      t.last_nack_error = error;
    }
  }
}

void XdsClient::Impl::complete(std::function<void(Result<SnapshotPtr>)> done, Result<SnapshotPtr> result) {
  deliver([done = std::move(done), result = std::move(result)]() mutable { done(std::move(result)); });
}

void XdsClient::Impl::resolve_waiters(const ResponseView& response, const ApplyOutcome& outcome) {
  std::set<std::string_view> removed(response.removed_resources.begin(), response.removed_resources.end());
  for (auto it = waiters.begin(); it != waiters.end();) {
    const std::string& key = it->first;
    Result<SnapshotPtr> result = current;
    if (store.knows(key)) {
      answered_missing.erase(key);
    } else if (removed.contains(key)) {
      answered_missing.insert(key);
      result =
          fail(Errc::kNotFound, "xDS on-demand lookup of '" + key + "': the control plane does not know it");
    } else if (auto r = std::find_if(outcome.rejected.begin(), outcome.rejected.end(),
                                     [&](const Rejection& x) { return x.name == key; });
               r != outcome.rejected.end()) {
      result = fail(Errc::kConfig, "xDS on-demand lookup of '" + key + "': answer rejected: " + r->reason);
    } else {
      ++it;
      continue;
    }
    for (auto& w : it->second) {
      loop.cancel(w.timer);
      complete(std::move(w.done), result);
    }
    it = waiters.erase(it);
  }
}

void XdsClient::Impl::add_waiter(std::string key, Clock::time_point deadline,
                                 std::function<void(Result<SnapshotPtr>)> done) {
  if (stopping) return complete(std::move(done), fail(Errc::kClosed, "xDS client stopped"));
  if (!options.on_demand) {
    return complete(std::move(done),
                    fail(Errc::kNotFound, "xDS on-demand lookup of '" + key + "': XDS_ON_DEMAND is off"));
  }
  if (store.knows(key)) return complete(std::move(done), current);
  if (answered_missing.contains(key)) {
    return complete(std::move(done), fail(Errc::kNotFound, "xDS on-demand lookup of '" + key +
                                                               "': the control plane does not know it"));
  }
  std::uint64_t id = next_waiter++;
  auto timer = loop.schedule(deadline, [this, key, id] {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    auto& list = it->second;
    auto w = std::find_if(list.begin(), list.end(), [id](const Waiter& x) { return x.id == id; });
    if (w == list.end()) return;
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - w->started);
    bool connected = stream && stream->got_response;
    complete(std::move(w->done),
             fail(Errc::kTimeout, "xDS on-demand lookup of '" + key + "' not answered within " +
                                      std::to_string(waited.count()) + " ms (" +
                                      (connected ? "connected" : "not connected") + ")"));
    list.erase(w);
    if (list.empty()) waiters.erase(it);
  });
  waiters[key].push_back(Waiter{id, std::move(done), timer, Clock::now()});
  if (demanded.insert(key).second && stream && stream->open) {
    Request r;
    r.set_type_url(std::string(kAddressType));
    r.add_resource_names_subscribe(key);
    send(stream, std::move(r));
  }
}

XdsClient::XdsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

XdsClient::~XdsClient() { stop(); }

Result<std::unique_ptr<XdsClient>> XdsClient::create(XdsOptions options, config::LocalConfig local,
                                                     XdsCallbacks callbacks, XdsMetrics* metrics) {
  auto store = ResourceStore::create(std::move(local));
  if (!store) return std::unexpected(store.error());
  auto initial = store->build();
  if (!initial) return std::unexpected(initial.error());
  auto channel = rpc::make_channel(options.endpoint, options.max_backoff);
  if (!channel) return std::unexpected(channel.error());
  auto impl =
      std::make_unique<Impl>(std::move(options), std::move(*store), *initial, std::move(callbacks), metrics);
  impl->initial = *initial;
  impl->channel = std::move(*channel);
  impl->stub = std::make_unique<Stub>(impl->channel);
  return std::unique_ptr<XdsClient>(new XdsClient(std::move(impl)));
}

SnapshotPtr XdsClient::initial_snapshot() const { return impl_->initial; }

void XdsClient::start() {
  impl_->loop.post([impl = impl_.get()] { impl->connect(); });
}

void XdsClient::stop() {
  if (!impl_) return;
  Impl* impl = impl_.get();
  impl->loop.run_sync([impl] {
    impl->stopping = true;
    if (impl->reconnect_timer != 0) impl->loop.cancel(impl->reconnect_timer);
    if (impl->stream) impl->stream->context.TryCancel();
    for (auto& [key, list] : impl->waiters) {
      for (auto& w : list) {
        impl->loop.cancel(w.timer);
        impl->complete(std::move(w.done), fail(Errc::kClosed, "xDS client stopped"));
      }
    }
    impl->waiters.clear();
  });
  impl->loop.stop();
  impl->stream.reset();  // its call was cancelled; free it while the rest of the client is intact
}

void XdsClient::fetch_on_demand(std::string key, std::chrono::steady_clock::time_point deadline,
                                std::function<void(Result<SnapshotPtr>)> done) {
  Impl* impl = impl_.get();
  impl->loop.post([impl, key = std::move(key), deadline, done = std::move(done)]() mutable {
    impl->add_waiter(std::move(key), deadline, std::move(done));
  });
}

XdsStatus XdsClient::status() const {
  std::lock_guard lock(impl_->status_mu);
  return impl_->status;
}

}  // namespace meshnode::xds
