#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <map>
#include <set>
#include <string>
#include <thread>

#include "base/error.hpp"
#include "kube/config.hpp"
#include "kube/enrollment.hpp"
#include "kube/informer.hpp"
#include "kube/status_writer.hpp"

namespace meshnode::telemetry {
class MetricsRegistry;
}

namespace meshnode::agent {

/// The Kubernetes side of meshnode-agent (issue 13): where enrollment and identity come from.
struct KubeOptions {
  kube::ClusterConfig cluster;
  std::string node_name;                              ///< NODE_NAME: pods are watched with spec.nodeName=<it>
  kube::Encoding encoding = kube::Encoding::kProtobuf;  ///< --kube-encoding
  kube::EnrollmentConfig enrollment;                  ///< EXCLUDE_NAMESPACES
  std::chrono::milliseconds add_wait{1000};           ///< CNI ADD: how long to wait for the watch to show the pod
  std::chrono::milliseconds sync_timeout{60000};      ///< start: how long to wait for the first lists
  std::string proc_root = "/proc";                    ///< where running pods' processes are found (netns finder)
};

/// Informers of this node's pods and all namespaces, the status writer, and one work queue: every
/// pod event (and every pod of a namespace whose dataplane-mode label changed) enqueues the pod's
/// key "namespace/name", and one thread calls `reconcile(key)` for each, in order, a key queued
/// twice before it ran is reconciled once. Nothing is programmed on informer threads.
///
/// Threads: the informers' own, the writer's, and the queue thread that runs `reconcile` (which may
/// block). Members callable from any thread.
class KubeWatch {
 public:
  using Reconcile = std::function<void(const std::string& key)>;

  /// Starts informers and the writer and waits for both caches to sync (up to
  /// `options.sync_timeout`, logging while it waits); the queue thread starts with `start_queue`.
  /// Errc::kConfig for an unusable cluster config, Errc::kTimeout when the caches did not sync.
  [[nodiscard]] static base::Result<std::unique_ptr<KubeWatch>> start(KubeOptions options,
                                                                     telemetry::MetricsRegistry& metrics);
  ~KubeWatch();
  KubeWatch(const KubeWatch&) = delete;
  KubeWatch& operator=(const KubeWatch&) = delete;

  /// Starts the queue thread with every cached pod queued (the reconcile at start).
  void start_queue(Reconcile reconcile);
  /// Queues `key` for the queue thread.
  void enqueue(const std::string& key);
  /// True when nothing is queued or being reconciled (tests wait on it).
  [[nodiscard]] bool idle() const;

  [[nodiscard]] const kube::PodInformer& pods() const { return *pods_; }
  [[nodiscard]] const kube::NamespaceInformer& namespaces() const { return *namespaces_; }
  [[nodiscard]] const KubeOptions& options() const { return options_; }
  /// Queues the ambient.istio.io/redirection annotation of pod `key` ("enabled" or removed).
  void set_redirection(const std::string& namespace_, const std::string& name, bool enabled);

  /// Stops the queue thread, the informers and the writer (after a short flush). Idempotent.
  void stop();

 private:
  KubeWatch(KubeOptions options, telemetry::MetricsRegistry& metrics);
  void run_queue();
  void export_stats();
  void on_namespace(const kube::Namespace* old, const kube::Namespace& now);

  KubeOptions options_;
  telemetry::MetricsRegistry& metrics_;
  std::unique_ptr<kube::NamespaceInformer> namespaces_;
  std::unique_ptr<kube::PodInformer> pods_;
  std::unique_ptr<kube::StatusWriter> writer_;
  Reconcile reconcile_;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> queued_;
  bool busy_ = false;
  bool stopping_ = false;
  std::map<std::string, std::uint64_t> exported_;  // queue thread only: counter values already added
};

}  // namespace meshnode::agent
