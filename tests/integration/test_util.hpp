#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <sys/types.h>

namespace meshnode::integration {

/// A shared-mode meshnode-proxy's addresses inside its node netns. The first proxy of a node uses
/// the defaults; a second one (restart hand-off) needs other admin ports (they do not reuse ports).
struct ProxyPorts {
  int admin = 15000;
  int metrics = 15020;
  int readiness = 15021;
};

/// A fresh cluster prefix "mn-<6 hex>" (the form scripts/lib/cluster.sh accepts and cleans up).
std::string random_prefix();

/// KEY=value lines (scripts/lib/cluster.sh's cluster.env) → map.
std::map<std::string, std::string> parse_env(const std::string& text);

/// The last `n` lines of `text`, newline-terminated (for failure messages).
std::string tail_lines(const std::string& text, std::size_t n);

/// Sum of the Prometheus series of `metric` (labelled or not) whose line contains every string in
/// `labels` (e.g. `source_principal="spiffe://…"`).
double metric_sum(std::string_view text, std::string_view metric, const std::vector<std::string>& labels);

/// VmRSS of process `pid` from /proc/<pid>/status, in KiB (0 when it is gone or unreadable).
long rss_kib(pid_t pid);

}  // namespace meshnode::integration
