// Kubernetes informers → one work queue → the agent's reconcile (issue 13).
#include "agent/kube_watch.hpp"

#include <spdlog/spdlog.h>

#include "telemetry/metrics.hpp"

namespace meshnode::agent {

using namespace std::chrono_literals;

namespace {

const std::string* dataplane_mode(const kube::Namespace* ns) {
  return ns == nullptr ? nullptr : ns->metadata.labels.find(kube::kDataplaneModeLabel);
}

bool same_mode(const std::string* a, const std::string* b) {
  return (a == nullptr && b == nullptr) || (a != nullptr && b != nullptr && *a == *b);
}

}  // namespace

KubeWatch::KubeWatch(KubeOptions options, telemetry::MetricsRegistry& metrics)
    : options_(std::move(options)), metrics_(metrics) {}

KubeWatch::~KubeWatch() { stop(); }

base::Result<std::unique_ptr<KubeWatch>> KubeWatch::start(KubeOptions options, telemetry::MetricsRegistry& metrics) {
  if (options.node_name.empty()) return base::fail(base::Errc::kConfig, "NODE_NAME (--node-name) is required with Kubernetes");
  std::unique_ptr<KubeWatch> watch(new KubeWatch(std::move(options), metrics));
  KubeWatch* raw = watch.get();
  const KubeOptions& o = watch->options_;

  kube::InformerOptions<kube::Pod> pod_options;
  pod_options.field_selector = "spec.nodeName=" + o.node_name;
  pod_options.encoding = o.encoding;
  pod_options.transform = kube::keep_agent_annotations;
  pod_options.index = kube::pod_ip_index;
  kube::InformerHandlers<kube::Pod> pod_handlers;
  pod_handlers.on_add = [raw](const kube::Pod& pod) { raw->enqueue(kube::object_key(pod.metadata)); };
  pod_handlers.on_update = [raw](const kube::Pod&, const kube::Pod& now) { raw->enqueue(kube::object_key(now.metadata)); };
  pod_handlers.on_delete = [raw](const kube::Pod& last, bool) { raw->enqueue(kube::object_key(last.metadata)); };
  auto pods = kube::PodInformer::start(o.cluster, std::move(pod_options), std::move(pod_handlers));
  if (!pods) return std::unexpected(pods.error());
  watch->pods_ = std::move(*pods);

  // After the pods: the namespace handler reads the pod cache.
  kube::InformerOptions<kube::Namespace> ns_options;
  ns_options.encoding = o.encoding;
  kube::InformerHandlers<kube::Namespace> ns_handlers;
  ns_handlers.on_add = [raw](const kube::Namespace& now) { raw->on_namespace(nullptr, now); };
  ns_handlers.on_update = [raw](const kube::Namespace& old, const kube::Namespace& now) { raw->on_namespace(&old, now); };
  auto namespaces = kube::NamespaceInformer::start(o.cluster, std::move(ns_options), std::move(ns_handlers));
  if (!namespaces) return std::unexpected(namespaces.error());
  watch->namespaces_ = std::move(*namespaces);

  kube::StatusWriterOptions writer_options;
  writer_options.encoding = o.encoding;
  auto writer = kube::StatusWriter::start(o.cluster, writer_options, [raw](const std::string& key, const base::Result<void>& r) {
    if (r) return;
    // A release of a pod that is already deleted answers 404: expected, not worth a warning.
    if (r.error().code == base::Errc::kNotFound) return;
    spdlog::warn("kube: redirection annotation of pod {} not written: {}", key, r.error().message());
    raw->metrics_.counter("meshnode_agent_kube_status_patch_failures_total", "Pod status patches given up.").inc();
  });
  if (!writer) return std::unexpected(writer.error());
  watch->writer_ = std::move(*writer);

  const auto deadline = std::chrono::steady_clock::now() + o.sync_timeout;
  while (!(watch->namespaces_->synced() && watch->pods_->synced())) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return base::fail(base::Errc::kTimeout, "Kubernetes caches not synced within " + std::to_string(o.sync_timeout.count()) +
                                                  " ms (" + o.cluster.server + "); see the kube warnings above");
    }
    if (!watch->pods_->wait_for_sync(5s) || !watch->namespaces_->wait_for_sync(1s)) {
      spdlog::info("kube: waiting for the first lists of pods (node {}) and namespaces from {}", o.node_name, o.cluster.server);
    }
  }
  spdlog::info("kube: caches synced server={} node={} pods={} namespaces={} encoding={}", o.cluster.server, o.node_name,
               watch->pods_->size(), watch->namespaces_->size(), o.encoding == kube::Encoding::kJson ? "json" : "protobuf");
  return watch;
}

void KubeWatch::on_namespace(const kube::Namespace* old, const kube::Namespace& now) {
  if (old != nullptr && same_mode(dataplane_mode(old), dataplane_mode(&now))) return;
  for (const auto& pod : pods_->list()) {
    if (pod->metadata.namespace_ == now.metadata.name) enqueue(kube::object_key(pod->metadata));
  }
}

void KubeWatch::enqueue(const std::string& key) {
  std::lock_guard lock(mutex_);
  if (!queued_.insert(key).second) return;
  queue_.push_back(key);
  cv_.notify_all();
}

bool KubeWatch::idle() const {
  std::lock_guard lock(mutex_);
  return queue_.empty() && !busy_;
}

void KubeWatch::start_queue(Reconcile reconcile) {
  reconcile_ = std::move(reconcile);
  for (const auto& pod : pods_->list()) enqueue(kube::object_key(pod->metadata));
  thread_ = std::thread([this] { run_queue(); });
}

void KubeWatch::run_queue() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    if (queue_.empty()) {
      lock.unlock();
      export_stats();
      lock.lock();
      cv_.wait_for(lock, 1s, [&] { return stopping_ || !queue_.empty(); });
      continue;
    }
    std::string key = std::move(queue_.front());
    queue_.pop_front();
    queued_.erase(key);
    busy_ = true;
    lock.unlock();
    try {
      reconcile_(key);
    } catch (const std::exception& e) {
      spdlog::error("kube: reconcile of pod {} threw: {}", key, e.what());
    }
    lock.lock();
    busy_ = false;
  }
}

// The informers keep plain atomics (kube/ has no metrics registry); they are added to the agent's
// counters here, as deltas, once a second and whenever the queue runs dry.
void KubeWatch::export_stats() {
  auto add = [this](const std::string& name, const std::string& help, const std::string& resource, std::uint64_t now) {
    std::uint64_t& seen = exported_[name + "/" + resource];
    if (now > seen) metrics_.counter(name, help, {{"resource", resource}}).inc(now - seen);
    seen = now;
  };
  auto informer = [&](const std::string& resource, const kube::InformerStats& s, std::uint64_t bad) {
    add("meshnode_agent_kube_lists_total", "Complete (paged) lists of a Kubernetes resource.", resource, s.lists.load());
    add("meshnode_agent_kube_relists_total", "Lists forced by 410 Expired (history too old).", resource, s.relists.load());
    add("meshnode_agent_kube_watches_total", "Watch requests started.", resource, s.watches.load());
    add("meshnode_agent_kube_watch_events_total", "Watch events applied, bookmarks included.", resource, s.events.load());
    add("meshnode_agent_kube_bookmarks_total", "Watch bookmarks received.", resource, s.bookmarks.load());
    add("meshnode_agent_kube_errors_total", "Failed lists and watches (each followed by a backoff).", resource,
        s.errors.load());
    add("meshnode_agent_kube_bad_objects_total", "Undecodable objects skipped (logged at warn).", resource, bad);
  };
  informer("pods", pods_->stats(), pods_->bad_objects());
  informer("namespaces", namespaces_->stats(), namespaces_->bad_objects());
  const kube::ClientStats& w = writer_->stats();
  add("meshnode_agent_kube_requests_total", "Requests of the status writer to the API server.", "pods/status",
      w.requests.load());
  add("meshnode_agent_kube_request_errors_total", "Status writer requests failed or refused.", "pods/status",
      w.request_errors.load());
}

void KubeWatch::set_redirection(const std::string& namespace_, const std::string& name, bool enabled) {
  writer_->set_annotation(namespace_, name, std::string(kube::kRedirectionAnnotation),
                          enabled ? std::optional<std::string>(std::string(kube::kRedirectionEnabled)) : std::nullopt);
}

void KubeWatch::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ && !thread_.joinable() && !pods_) return;
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  if (pods_) pods_->stop();
  if (namespaces_) namespaces_->stop();
  if (writer_) {
    (void)writer_->flush(2s);
    writer_->stop();
  }
}

}  // namespace meshnode::agent
