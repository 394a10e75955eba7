#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace meshnode::telemetry {

/// Label pairs of one series, {name, value}, rendered in this order. Names must be valid
/// Prometheus label names (code-controlled); values may be anything (escaped on render, and an
/// empty value renders as "unknown", the Istio convention).
using Labels = std::vector<std::pair<std::string, std::string>>;

/// A monotonically increasing 64-bit counter. Lock-free; any thread may call.
class Counter {
 public:
  Counter() noexcept = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  /// Adds `n` (relaxed: a counter orders nothing else).
  void inc(uint64_t n = 1) noexcept { value_.fetch_add(n, std::memory_order_relaxed); }
  [[nodiscard]] uint64_t value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

/// A signed 64-bit gauge. Lock-free; any thread may call.
class Gauge {
 public:
  Gauge() noexcept = default;
  Gauge(const Gauge&) = delete;
  Gauge& operator=(const Gauge&) = delete;

  void set(int64_t v) noexcept { value_.store(v, std::memory_order_relaxed); }
  void add(int64_t n = 1) noexcept { value_.fetch_add(n, std::memory_order_relaxed); }
  void sub(int64_t n = 1) noexcept { value_.fetch_sub(n, std::memory_order_relaxed); }
  [[nodiscard]] int64_t value() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

/// Thread-safe registry of counter and gauge families, rendered as Prometheus text format 0.0.4.
///
/// A family is a metric name with one help text and one type; a series is one label set within
/// it. Lookups (`counter`, `gauge`) take a mutex; the returned references stay valid for the
/// registry's lifetime, so data-path threads look a series up once and then increment lock-free.
/// Series are never removed. Registering one name as both counter and gauge is a programming
/// error and aborts (MESHNODE_CHECK).
class MetricsRegistry {
 public:
  MetricsRegistry() = default;
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  /// The counter series `name{labels}`, created at 0 on first use. `help` is taken from the first
  /// registration of `name`. Counter names carry the `_total` suffix themselves (Istio names).
  /// Any thread.
  Counter& counter(std::string_view name, std::string_view help, Labels labels = {});

  /// The gauge series `name{labels}`, created at 0 on first use. Any thread.
  Gauge& gauge(std::string_view name, std::string_view help, Labels labels = {});

  /// Prometheus text format 0.0.4: per family `# HELP`, `# TYPE`, then one line per series in
  /// insertion order; families sorted by name. Any thread (takes the lookup mutex).
  [[nodiscard]] std::string render() const;

 private:
  enum class Type { kCounter, kGauge };
  struct Series {
    explicit Series(Labels l) : labels(std::move(l)) {}
    Labels labels;
    Counter counter;  // used when the family is a counter
    Gauge gauge;      // used when the family is a gauge
  };
  struct Family {
    Type type;
    std::string help;
    std::deque<Series> series;  // insertion order; deque keeps references stable
    std::map<Labels, Series*> by_labels;
  };

  Series& series(std::string_view name, std::string_view help, Type type, Labels labels);
  static void render_family(std::string& out, const std::string& name, const Family& family);

  mutable std::mutex mutex_;
  std::map<std::string, Family, std::less<>> families_;
};

/// Registers `istio_build{component="meshnode",tag=<version>} 1` (gauge). An empty `version`
/// renders as "unknown".
void register_build_info(MetricsRegistry& registry, std::string_view version);

/// Escapes a label value for the text format: backslash, double quote and newline.
[[nodiscard]] std::string escape_label_value(std::string_view value);

}  // namespace meshnode::telemetry
