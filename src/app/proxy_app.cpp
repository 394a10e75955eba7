#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <thread>

#include "admin/admin_routes.hpp"
#include "admin/config_dump.hpp"
#include "http/http_server.hpp"
#include "http/telemetry_routes.hpp"
#include "telemetry/metrics.hpp"
#include "telemetry/readiness.hpp"
#include "proxy/tcp_metrics.hpp"
#include "app/options.hpp"
#include "base/duration.hpp"
#include "base/log.hpp"
#include "base/memory.hpp"
#include "ca/certificate_manager.hpp"
#include "ca/istio_ca_client.hpp"
#include "config/local_config.hpp"
#include "inpod/workload_manager.hpp"
#include "inpod/zds_client.hpp"
#include "net/awaitable.hpp"
#include "net/drain_scope.hpp"
#include "net/reactor_records.hpp"
#include "net/socket_factory.hpp"
#include "rpc/endpoint.hpp"
#include "tls/crl.hpp"
#include "tls/local_ca.hpp"
#include "xds/client.hpp"

namespace meshnode::app {
namespace {

using base::Errc;
using base::fail;
using base::Result;

constexpr std::string_view kVersion = "0.1.0";
// After the drain deadline, how long the reset connections get to end before the workers stop.
constexpr std::chrono::milliseconds kAbortGrace{1000};

/// Raises the open-files soft limit to the hard limit, as the reference does: every connection
/// costs the proxy two or more fds, and 1024 (the usual soft default) made a legitimate client
/// wait seconds behind accept failures (issue 11 defect 9). Logs the figure either way.
void raise_open_files_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    spdlog::warn("open-files limit unknown: getrlimit: {}", std::strerror(errno));
    return;
  }
  const rlim_t before = limit.rlim_cur;
  if (limit.rlim_cur != limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      spdlog::warn("open-files limit stays {} (hard {}): setrlimit: {}", before, limit.rlim_max, std::strerror(errno));
      return;
    }
  }
  spdlog::info("open-files limit {} (soft was {}, hard {})", limit.rlim_cur, before, limit.rlim_max);
}

Result<config::LocalConfig> load_local(const Options& o) {
  if (o.config_path.empty()) return config::LocalConfig{};
  return config::load_local_config(o.config_path);
}

Result<std::shared_ptr<const state::StateSnapshot>> build_state(config::LocalConfig config) {
  return state::StateSnapshot::build(std::move(config.workloads), std::move(config.services),
                                     std::move(config.policies));
}

Result<std::shared_ptr<const state::StateSnapshot>> load_state(const Options& o) {
  auto config = load_local(o);
  if (!config) return std::unexpected(config.error());
  return build_state(std::move(*config));
}

/// The control plane the proxy runs against (from the environment): istiod's xDS when XDS_ADDRESS
/// is set (local config and xDS combine), istiod's CA when CA_ADDRESS is set, else the built-in CA.
struct ControlPlane {
  std::optional<xds::XdsOptions> xds;
  config::LocalConfig local;  ///< passed to the xDS client (only used when `xds` is set)
  std::unique_ptr<ca::CertificateSource> ca;
  std::string ca_name;  ///< for the startup log: the CA address or the built-in CA directory
  ca::ManagerOptions certs;
  std::shared_ptr<tls::CrlStore> crl;  ///< CRL_PATH; null when unset
};

/// istio_xds_* metrics (research §5.1) over the proxy's registry.
class RegistryXdsMetrics final : public xds::XdsMetrics {
 public:
  explicit RegistryXdsMetrics(telemetry::MetricsRegistry& registry) : registry_(registry) {}
  void connection_terminated(std::string_view reason) override {
    registry_
        .counter("istio_xds_connection_terminations_total", "Total xDS connection terminations, by reason",
                 {{"reason", std::string(reason)}})
        .inc();
  }
  void message_received(std::string_view type_url, std::size_t bytes) override {
    telemetry::Labels url{{"url", std::string(type_url)}};
    registry_.counter("istio_xds_message_total", "Total xDS messages received, by type URL", url).inc();
    registry_.counter("istio_xds_message_bytes_total", "Total bytes of xDS messages received, by type URL", url)
        .inc(bytes);
  }

 private:
  telemetry::MetricsRegistry& registry_;
};

/// XDS_ON_DEMAND lookups for the data path, answered by the xDS client.
class XdsOnDemand final : public proxy::OnDemandLookup {
 public:
  explicit XdsOnDemand(xds::XdsClient& client) : client_(client) {}
  void lookup(std::string key, std::chrono::steady_clock::time_point deadline, Done done) override {
    client_.fetch_on_demand(std::move(key), deadline, std::move(done));
  }

 private:
  xds::XdsClient& client_;
};

/// A pod enrolled from the command line (--pod <uid>=<netns path>).
struct StaticPod {
  std::string uid;
  inpod::WorkloadIdentity who;
  base::Netns netns;
};

/// Parses --pod; the uid must name a workload of the config (its identity comes from there).
Result<StaticPod> resolve_pod(const state::StateSnapshot& snapshot, const std::string& spec) {
  auto eq = spec.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
    return fail(Errc::kConfig, "--pod '" + spec + "': expected <workload uid>=<netns path>");
  }
  std::string uid = spec.substr(0, eq);
  auto workload = snapshot.workload_by_uid(uid);
  if (!workload) return fail(Errc::kConfig, "--pod '" + spec + "': no workload with uid '" + uid + "' in the config");
  auto netns = base::Netns::open(spec.substr(eq + 1));
  if (!netns) return std::unexpected(netns.error());
  return StaticPod{uid, {workload->name, workload->ns, workload->service_account}, std::move(*netns)};
}

class ProxyApp {
 public:
  ProxyApp(const Options& o, std::shared_ptr<const state::StateSnapshot> snapshot, ControlPlane plane,
           std::chrono::milliseconds deadline)
      : options_(o),
        deadline_(deadline),
        data_tasks_("data path", &task_failures("data")),
        control_tasks_("control", &task_failures("control")),
        state_(std::move(snapshot)),
        certs_(std::make_unique<ca::CertificateManager>(std::move(plane.ca), plane.certs)),
        xds_options_(std::move(plane.xds)),
        local_(std::move(plane.local)),
        crl_(std::move(plane.crl)),
        xds_metrics_(registry_),
        tcp_metrics_(registry_),
        admin_(control_, "admin", &task_failures("http")),
        metrics_(control_, "metrics", &task_failures("http")),
        readiness_server_(control_, "readiness", &task_failures("http")) {
    telemetry::register_build_info(registry_, kVersion);
    for (int i = 0; i < o.worker_threads; ++i) workers_.push_back(std::make_unique<asio::io_context>(1));
    loads_ = std::make_unique<proxy::WorkerLoads>(workers_.size(), &registry_);
  }

  int run(std::vector<StaticPod> pods);

 private:
  /// Creates the xDS client (XDS_ADDRESS set): its snapshots feed the state store, re-check live
  /// connections' policies and scope certificate prefetch; readiness waits for its first responses.
  Result<void> start_xds();
  /// A new snapshot from xDS (control thread).
  void apply(const std::shared_ptr<const state::StateSnapshot>& snapshot);
  /// CRL_PATH: re-reads the file when it changed (2 s, the reference's debounce).
  asio::awaitable<void> watch_crl();
  Result<void> listen(http::HttpServer& server, const std::string& addr);
  /// Re-reads the local config; on success publishes the new snapshot and re-checks live inbound
  /// connections against its policies. A bad file keeps the previous state (logged, counted).
  void reload(std::string_view why);
  asio::awaitable<void> watch_config();
  asio::awaitable<void> trim_heap();
  /// base::release_clean_file_pages, logged at debug level.
  void release_file_pages();
  void watch_sighup();
  void start_workers();
  void stop_workers();
  std::string dump() const;
  asio::awaitable<void> shutdown();
  /// Starts shutdown (signal, /quitquitquit) as a control task.
  void begin_shutdown();
  /// meshnode_task_failures_total{scope}: tasks that ended with an exception (a bug, never silent).
  telemetry::Counter& task_failures(std::string_view scope) {
    return registry_.counter("meshnode_task_failures_total",
                             "Tasks (connections, sessions, loops) that ended with an exception, by scope",
                             {{"scope", std::string(scope)}});
  }

  Options options_;
  std::chrono::milliseconds deadline_;
  telemetry::MetricsRegistry registry_;
  net::InPodSockets sockets_;
  /// Every connection, session and accept loop of every pod (shutdown waits for it to empty).
  net::DrainScope data_tasks_;
  /// The control thread's loops (ZDS, config watch, shutdown).
  net::DrainScope control_tasks_;
  asio::io_context control_{1};
  /// Open connections per worker; declared before workers_ so that it outlives the connection
  /// tasks destroyed with them.
  std::unique_ptr<proxy::WorkerLoads> loads_;
  std::vector<std::unique_ptr<asio::io_context>> workers_;
  std::vector<std::thread> threads_;
  state::StateStore state_;
  std::unique_ptr<ca::CertificateManager> certs_;
  std::optional<xds::XdsOptions> xds_options_;
  config::LocalConfig local_;
  std::shared_ptr<tls::CrlStore> crl_;
  RegistryXdsMetrics xds_metrics_;
  std::unique_ptr<xds::XdsClient> xds_;
  std::unique_ptr<XdsOnDemand> on_demand_;
  proxy::TcpMetrics tcp_metrics_;
  telemetry::Readiness readiness_;
  http::HttpServer admin_;
  http::HttpServer metrics_;
  http::HttpServer readiness_server_;
  std::unique_ptr<inpod::WorkloadManager> pods_;
  std::unique_ptr<inpod::ZdsClient> zds_;
  bool shutting_down_ = false;
  asio::signal_set hup_{control_, SIGHUP};
  asio::steady_timer config_tick_{control_};
  asio::steady_timer crl_tick_{control_};
  asio::steady_timer trim_tick_{control_};
};

/// What identifies one version of the config file: an atomic rename changes the inode, an
/// in-place edit the mtime or size.
struct FileStamp {
  ino_t ino = 0;
  off_t size = -1;
  long long mtime_ns = 0;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};

FileStamp stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_ino, st.st_size, st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec};
}

void ProxyApp::reload(std::string_view why) {
  auto next = load_state(options_);
  if (!next) {
    spdlog::error("config reload ({}) failed, keeping the previous state: {}", why, next.error().message());
    registry_.counter("meshnode_config_reloads_total", "Local config reloads by result", {{"result", "error"}}).inc();
    return;
  }
  state_.store(*next);
  if (pods_) pods_->recheck_policies(*next);
  registry_.counter("meshnode_config_reloads_total", "Local config reloads by result", {{"result", "ok"}}).inc();
  spdlog::info("config reloaded ({}): {} workloads, {} services, {} policies", why, (*next)->workloads().size(),
               (*next)->services().size(), (*next)->policies().size());
}

asio::awaitable<void> ProxyApp::watch_config() {
  // Polling (250 ms) rather than inotify: it also sees the file replaced through a symlink swap
  // (Kubernetes ConfigMap updates) and costs one stat per tick.
  auto last = stamp_of(options_.config_path);
  while (!shutting_down_) {
    config_tick_.expires_after(std::chrono::milliseconds(250));
    co_await config_tick_.async_wait(net::kNoThrow);
    if (shutting_down_) break;
    auto now = stamp_of(options_.config_path);
    if (now == last) continue;
    last = now;
    reload("file changed");
  }
}

void ProxyApp::release_file_pages() {
  // The code and read-only data touched once (start-up, a rare error path) and their fault-around
  // neighbours would otherwise stay in RSS; what the data path uses faults back in at once.
  if (auto released = base::release_clean_file_pages(); !released) {
    spdlog::debug("file-backed pages not released: {}", released.error().message());
  } else {
    spdlog::debug("released {} KiB of clean file-backed pages", *released / 1024);
  }
}

asio::awaitable<void> ProxyApp::trim_heap() {
  // Freed memory stays with the allocator (jemalloc's per-thread caches, glibc's per-thread
  // arenas): after a burst of connections the RSS would stay at the burst's peak although nothing
  // uses it. Every 30 s each worker hands its thread cache back, and the last one to do so returns
  // the free pages of every arena to the kernel (one walk: well under a millisecond here). Before
  // that, each worker deletes the reactor records its closed sockets left (net/reactor_records.hpp);
  // what they free is returned at the next round.
  while (!shutting_down_) {
    trim_tick_.expires_after(std::chrono::seconds(30));
    co_await trim_tick_.async_wait(net::kNoThrow);
    if (shutting_down_) break;
    auto pending = std::make_shared<std::atomic<std::size_t>>(workers_.size());
    for (auto& io : workers_) {
      asio::post(*io, [pending, io = io.get()] {
        net::release_idle_reactor_records(*io);
        base::flush_thread_cache();
        if (pending->fetch_sub(1) == 1) base::release_free_memory();
      });
    }
    base::flush_thread_cache();
    release_file_pages();
  }
}

void ProxyApp::watch_sighup() {
  hup_.async_wait([this](const std::error_code& ec, int) {
    if (ec) return;
    reload("SIGHUP");
    watch_sighup();
  });
}

Result<void> ProxyApp::listen(http::HttpServer& server, const std::string& addr) {
  auto parsed = base::SocketAddr::parse(addr);
  if (!parsed) return fail(Errc::kConfig, "listen address: " + parsed.error().context);
  return server.listen(parsed->ip.to_string(), parsed->port);
}

void ProxyApp::start_workers() {
  for (auto& io : workers_) {
    threads_.emplace_back([io = io.get()] {
      auto guard = asio::make_work_guard(*io);
      net::reclaim_reactor_records_on_this_thread(*io);  // this thread alone runs `io`
      io->run();
    });
  }
}

void ProxyApp::stop_workers() {
  for (auto& io : workers_) io->stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

std::string ProxyApp::dump() const {
  std::vector<admin::EnrolledPod> pods;
  if (pods_) {
    for (const auto& p : pods_->dump()) pods.push_back({p.uid, p.who.name, p.who.ns, p.who.service_account, p.netns, p.state});
  }
  if (!xds_) return admin::config_dump_json(*state_.load(), pods, certs_->dump());
  const auto xds = xds_->status();
  return admin::config_dump_json(*state_.load(), pods, certs_->dump(), &xds);
}

asio::awaitable<void> ProxyApp::shutdown() {
  if (shutting_down_) co_return;
  shutting_down_ = true;
  spdlog::info("shutdown: closing listeners, draining connections for up to {} ms", deadline_.count());
  if (zds_) zds_->stop();
  if (xds_) xds_->stop();
  config_tick_.cancel();
  crl_tick_.cancel();
  trim_tick_.cancel();
  if (pods_) pods_->stop_accepting_all();
  // Woken by the last connection's end; the deadline bounds the wait (no polling).
  const auto drain_until = std::chrono::steady_clock::now() + deadline_;
  const bool drained = co_await data_tasks_.wait_idle(drain_until);
  if (!drained) {
    spdlog::warn("shutdown: deadline reached, closing {} open connections", pods_ ? pods_->active_connections() : 0);
  }
  if (pods_) pods_->clear();  // resets what is left, on each worker
  data_tasks_.cancel();
  // The resets run on the workers; wait until their tasks have ended before stopping the workers.
  const auto abort_until = std::chrono::steady_clock::now() + kAbortGrace;
  if (!co_await data_tasks_.wait_idle(abort_until)) {
    spdlog::warn("shutdown: {} data-path tasks still running {} ms after the reset", data_tasks_.active(),
                 kAbortGrace.count());
  }
  std::error_code ignored;
  hup_.cancel(ignored);
  admin_.stop();
  metrics_.stop();
  readiness_server_.stop();
  control_.stop();
}

void ProxyApp::begin_shutdown() { control_tasks_.spawn(control_.get_executor(), shutdown(), "shutdown"); }

int ProxyApp::run(std::vector<StaticPod> pods) {
  readiness_.add_pending("proxy");
  http::add_readiness_routes(readiness_server_, readiness_);
  http::add_metrics_routes(metrics_, registry_);
  admin::add_admin_routes(admin_, [this] { return dump(); }, [this] { begin_shutdown(); });
  admin_.route("/debug/authz", [this](const http::HttpRequest& req) { return admin::debug_authz(*state_.load(), req.query); });
  for (auto [server, addr] : {std::pair{&admin_, options_.admin_addr}, std::pair{&metrics_, options_.metrics_addr},
                              std::pair{&readiness_server_, options_.readiness_addr}}) {
    if (auto ok = listen(*server, addr); !ok) {
      spdlog::error("cannot listen on {}: {}", addr, ok.error().message());
      return ok.error().code == Errc::kConfig ? kExitConfig : kExitRuntime;
    }
  }
  if (auto ok = start_xds(); !ok) {
    spdlog::error("xDS: {}", ok.error().message());
    return ok.error().code == Errc::kConfig ? kExitConfig : kExitRuntime;
  }
  start_workers();
  proxy::ProxyInputs inputs{state_, *certs_, tcp_metrics_, sockets_, data_tasks_, {}};
  inputs.options.transparent_inbound = options_.transparent_inbound;
  inputs.options.hbone_early_data = options_.hbone_early_data;
  inputs.on_demand = on_demand_.get();
  inputs.loads = loads_.get();
  std::vector<asio::io_context*> ios;
  for (auto& io : workers_) ios.push_back(io.get());
  pods_ = std::make_unique<inpod::WorkloadManager>(
      inpod::WorkloadManager::Deps{control_, ios, inputs, {options_.socks5}, readiness_, registry_});
  for (auto& pod : pods) {
    // A dedicated (--pod) pod that cannot start is a startup error: the operator asked for it.
    if (auto added = pods_->add(pod.uid, pod.who, std::move(pod.netns), true); !added) {
      spdlog::error("pod={} cannot start its listeners: {}", pod.uid, added.error().message());
      pods_->clear();
      stop_workers();
      return kExitRuntime;
    }
  }
  if (!options_.inpod_uds.empty()) {
    zds_ = std::make_unique<inpod::ZdsClient>(control_, options_.inpod_uds, *pods_, readiness_, registry_,
                                              control_tasks_);
    zds_->start();
  }
  readiness_.remove_pending("proxy");
  spdlog::info("meshnode-proxy {} ready: {} pod(s) from the command line, ZDS {}, {} worker(s), metrics {}, readiness {}, allocator {}",
               kVersion, pods.size(), options_.inpod_uds.empty() ? "off" : options_.inpod_uds, workers_.size(),
               options_.metrics_addr, options_.readiness_addr, base::allocator_name());

  if (xds_) {
    // Snapshots published before the pods existed are already in the store; from here on each
    // one re-checks the pods' live connections.
    readiness_.add_pending("state manager");
    xds_->start();
    if (!options_.config_path.empty()) {
      spdlog::warn("local config {} is combined with xDS as read at startup (not reloaded while XDS_ADDRESS is set)",
                   options_.config_path);
    }
  } else if (!options_.config_path.empty()) {
    watch_sighup();
    control_tasks_.spawn(control_.get_executor(), watch_config(), "config watch");
  }
  if (crl_) control_tasks_.spawn(control_.get_executor(), watch_crl(), "crl watch");
  control_tasks_.spawn(control_.get_executor(), trim_heap(), "heap trim");
  release_file_pages();  // start-up code is done with
  asio::signal_set signals(control_, SIGTERM, SIGINT);
  signals.async_wait([this](const std::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("received signal {}", signo);
    begin_shutdown();
  });
  control_.run();
  if (xds_) xds_->stop();
  zds_.reset();
  pods_.reset();
  stop_workers();
  // Tasks still suspended on a worker are destroyed with it, while what they refer to still lives.
  workers_.clear();
  spdlog::info("meshnode-proxy stopped");
  return kExitOk;
}

Result<void> ProxyApp::start_xds() {
  if (!xds_options_) return {};
  xds::XdsCallbacks callbacks{
      .post = [this](std::function<void()> fn) { asio::post(control_, std::move(fn)); },
      .on_snapshot = [this](xds::SnapshotPtr snapshot) { apply(snapshot); },
      .on_ready = [this] {
        spdlog::info("xDS: first responses applied, state manager ready");
        readiness_.remove_pending("state manager");
      }};
  const std::string address = xds_options_->endpoint.address;
  const bool on_demand = xds_options_->on_demand;
  auto client = xds::XdsClient::create(std::move(*xds_options_), std::move(local_), std::move(callbacks), &xds_metrics_);
  if (!client) return std::unexpected(client.error());
  xds_ = std::move(*client);
  if (on_demand) on_demand_ = std::make_unique<XdsOnDemand>(*xds_);
  state_.store(xds_->initial_snapshot());
  spdlog::info("xDS: {} ({})", address, on_demand ? "on-demand" : "wildcard");
  return {};
}

void ProxyApp::apply(const std::shared_ptr<const state::StateSnapshot>& snapshot) {
  state_.store(snapshot);
  if (pods_) pods_->recheck_policies(snapshot);
  certs_->update_workloads(*snapshot);
  SPDLOG_DEBUG("xDS snapshot: {} workloads, {} services, {} policies", snapshot->workloads().size(),
               snapshot->services().size(), snapshot->policies().size());
}

asio::awaitable<void> ProxyApp::watch_crl() {
  std::string last_error;
  while (!shutting_down_) {
    crl_tick_.expires_after(std::chrono::seconds(2));
    co_await crl_tick_.async_wait(net::kNoThrow);
    if (shutting_down_) break;
    auto changed = crl_->reload_if_changed();
    if (!changed) {
      if (changed.error().message() != last_error) {
        last_error = changed.error().message();
        spdlog::warn("CRL {}: {} (keeping the previous CRLs)", crl_->path().string(), last_error);
      }
      continue;
    }
    last_error.clear();
    if (*changed) spdlog::info("CRL {} reloaded: {} CRL(s)", crl_->path().string(), crl_->current()->size());
  }
}

/// Reads the control-plane settings from the environment (XDS_*, CA_*, NODE_NAME, CRL_PATH).
Result<ControlPlane> control_plane(const Options& o, config::LocalConfig local) {
  const auto env = rpc::process_environment();
  ControlPlane plane;
  auto xds_opts = xds::XdsOptions::from_env(env);
  if (!xds_opts) return std::unexpected(xds_opts.error());
  plane.xds = std::move(*xds_opts);
  plane.local = std::move(local);
  if (auto it = env.find("NODE_NAME"); it != env.end()) plane.certs.node_name = it->second;
  auto ca_opts = ca::IstioCaOptions::from_env(env);
  if (!ca_opts) return std::unexpected(ca_opts.error());
  if (*ca_opts) {
    (*ca_opts)->shared_mode = o.proxy_mode == "shared";
    plane.ca_name = (*ca_opts)->endpoint.address;
    auto client = ca::IstioCaClient::create(std::move(**ca_opts));
    if (!client) return std::unexpected(client.error());
    plane.ca = std::move(*client);
  } else {
    std::string ca_dir = o.ca_dir.empty() ? "/var/lib/meshnode/ca" : o.ca_dir;
    auto local_ca = tls::LocalCa::load_or_create(ca_dir);
    if (!local_ca) return fail(Errc::kIo, "built-in CA: " + local_ca.error().message());
    plane.ca_name = "built-in CA " + ca_dir;
    plane.ca = std::make_unique<ca::ProviderSource>(std::move(*local_ca));
  }
  if (!o.crl_path.empty()) {
    plane.crl = std::make_shared<tls::CrlStore>(o.crl_path);
    // A missing or bad file at startup is not fatal: it is retried every 2 s (logged).
    if (auto loaded = plane.crl->reload_if_changed(); !loaded) {
      spdlog::warn("CRL {}: {}", o.crl_path, loaded.error().message());
    }
    tls::set_crl_store(plane.crl);
  }
  return plane;
}

}  // namespace

int run_proxy(const Options& o) {
  if (auto ok = base::init_logging(o.log_level); !ok) {
    std::fprintf(stderr, "meshnode-proxy: %s\n", ok.error().message().c_str());
    return kExitConfig;
  }
  raise_open_files_limit();
  auto deadline = base::parse_duration(o.termination_deadline);
  auto local = load_local(o);
  if (!deadline || !local) {
    spdlog::error("configuration error: {}", (!deadline ? deadline.error() : local.error()).message());
    return kExitConfig;
  }
  auto snapshot = build_state(*local);
  if (!snapshot) {
    spdlog::error("configuration error: {}", snapshot.error().message());
    return kExitConfig;
  }
  std::vector<StaticPod> pods;
  for (const auto& spec : o.pods) {
    auto pod = resolve_pod(**snapshot, spec);
    if (!pod) {
      spdlog::error("{}", pod.error().message());
      return pod.error().code == Errc::kConfig ? kExitConfig : kExitRuntime;
    }
    pods.push_back(std::move(*pod));
  }
  auto plane = control_plane(o, std::move(*local));
  if (!plane) {
    spdlog::error("{}", plane.error().message());
    return plane.error().code == Errc::kConfig ? kExitConfig : kExitRuntime;
  }
  spdlog::info("certificates from {}", plane->ca_name);
  int rc = 0;
  {
    ProxyApp app(o, std::move(*snapshot), std::move(*plane), *deadline);
    rc = app.run(std::move(pods));
  }
  base::flush_logging();  // every line of the shutdown reaches stderr before the process exits
  return rc;
}

}  // namespace meshnode::app
