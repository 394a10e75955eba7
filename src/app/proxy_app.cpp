#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include <malloc.h>
#include <sys/resource.h>
#include <sys/stat.h>

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
#include "config/local_config.hpp"
#include "inpod/workload_manager.hpp"
#include "inpod/zds_client.hpp"
#include "net/awaitable.hpp"
#include "net/drain_scope.hpp"
#include "net/socket_factory.hpp"
#include "tls/local_ca.hpp"

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

Result<std::shared_ptr<const state::StateSnapshot>> load_state(const Options& o) {
  if (o.config_path.empty()) return state::StateSnapshot::empty();
  auto config = config::load_local_config(o.config_path);
  if (!config) return std::unexpected(config.error());
  return state::StateSnapshot::build(std::move(config->workloads), std::move(config->services),
                                     std::move(config->policies));
}

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
  ProxyApp(const Options& o, std::shared_ptr<const state::StateSnapshot> snapshot, std::unique_ptr<tls::LocalCa> ca,
           std::chrono::milliseconds deadline)
      : options_(o),
        deadline_(deadline),
        data_tasks_("data path", &task_failures("data")),
        control_tasks_("control", &task_failures("control")),
        state_(std::move(snapshot)),
        certs_(std::move(ca)),
        tcp_metrics_(registry_),
        admin_(control_, "admin", &task_failures("http")),
        metrics_(control_, "metrics", &task_failures("http")),
        readiness_server_(control_, "readiness", &task_failures("http")) {
    telemetry::register_build_info(registry_, kVersion);
    for (int i = 0; i < o.worker_threads; ++i) workers_.push_back(std::make_unique<asio::io_context>(1));
  }

  int run(std::vector<StaticPod> pods);

 private:
  Result<void> listen(http::HttpServer& server, const std::string& addr);
  /// Re-reads the local config; on success publishes the new snapshot and re-checks live inbound
  /// connections against its policies. A bad file keeps the previous state (logged, counted).
  void reload(std::string_view why);
  asio::awaitable<void> watch_config();
  asio::awaitable<void> trim_heap();
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
  std::vector<std::unique_ptr<asio::io_context>> workers_;
  std::vector<std::thread> threads_;
  state::StateStore state_;
  tls::CertManager certs_;
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

asio::awaitable<void> ProxyApp::trim_heap() {
  // glibc keeps freed memory in its per-thread arenas: after a burst of connections the RSS
  // would stay at the burst's peak although nothing uses it. Returning free pages every 30 s
  // costs one heap walk (well under a millisecond for our heap sizes).
  while (!shutting_down_) {
    trim_tick_.expires_after(std::chrono::seconds(30));
    co_await trim_tick_.async_wait(net::kNoThrow);
    if (shutting_down_) break;
    ::malloc_trim(0);
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
  return admin::config_dump_json(*state_.load(), pods, certs_.dump());
}

asio::awaitable<void> ProxyApp::shutdown() {
  if (shutting_down_) co_return;
  shutting_down_ = true;
  spdlog::info("shutdown: closing listeners, draining connections for up to {} ms", deadline_.count());
  if (zds_) zds_->stop();
  config_tick_.cancel();
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
  start_workers();
  proxy::ProxyInputs inputs{state_, certs_, tcp_metrics_, sockets_, data_tasks_, {}};
  inputs.options.transparent_inbound = options_.transparent_inbound;
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
  spdlog::info("meshnode-proxy {} ready: {} pod(s) from the command line, ZDS {}, {} worker(s), metrics {}, readiness {}",
               kVersion, pods.size(), options_.inpod_uds.empty() ? "off" : options_.inpod_uds, workers_.size(),
               options_.metrics_addr, options_.readiness_addr);

  if (!options_.config_path.empty()) {
    watch_sighup();
    control_tasks_.spawn(control_.get_executor(), watch_config(), "config watch");
  }
  control_tasks_.spawn(control_.get_executor(), trim_heap(), "heap trim");
  asio::signal_set signals(control_, SIGTERM, SIGINT);
  signals.async_wait([this](const std::error_code& ec, int signo) {
    if (ec) return;
    spdlog::info("received signal {}", signo);
    begin_shutdown();
  });
  control_.run();
  zds_.reset();
  pods_.reset();
  stop_workers();
  // Tasks still suspended on a worker are destroyed with it, while what they refer to still lives.
  workers_.clear();
  spdlog::info("meshnode-proxy stopped");
  return kExitOk;
}

}  // namespace

int run_proxy(const Options& o) {
  if (auto ok = base::init_logging(o.log_level); !ok) {
    std::fprintf(stderr, "meshnode-proxy: %s\n", ok.error().message().c_str());
    return kExitConfig;
  }
  raise_open_files_limit();
  auto deadline = base::parse_duration(o.termination_deadline);
  auto snapshot = load_state(o);
  if (!deadline || !snapshot) {
    spdlog::error("configuration error: {}", (!deadline ? deadline.error() : snapshot.error()).message());
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
  std::string ca_dir = o.ca_dir.empty() ? "/var/lib/meshnode/ca" : o.ca_dir;
  auto ca = tls::LocalCa::load_or_create(ca_dir);
  if (!ca) {
    spdlog::error("built-in CA: {}", ca.error().message());
    return kExitRuntime;
  }
  ProxyApp app(o, std::move(*snapshot), std::move(*ca), *deadline);
  return app.run(std::move(pods));
}

}  // namespace meshnode::app
