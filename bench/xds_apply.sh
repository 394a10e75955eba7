#!/usr/bin/env bash
# The xDS apply benchmark (issue #12) the way its figures are reported: N fresh processes per size
# (the initial apply of a real proxy runs in a fresh process, so --repeat's warmed runs are not
# used), the sizes interleaved, then min / median / max per size. Each process prints its own
# line too, with the 1-minute load average before it ran: on a shared 2-vCPU host the same binary
# swings by up to 2x from minute to minute, so a figure is only worth its load average.
#
# Usage: bench/xds_apply.sh [N]        (default 9; builds xds_apply_bench with the release preset)
#   XDS_APPLY_BENCH=/path/to/xds_apply_bench bench/xds_apply.sh 15   # a given binary
# Targets: apply <= 0.35 s CPU per 100,000 workloads; <= 1,000 B of state per workload.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${1:-9}
bin=${XDS_APPLY_BENCH:-build/release/bench/xds_apply_bench}
if [[ -z ${XDS_APPLY_BENCH:-} ]]; then
  # shellcheck source=../scripts/lib/common.sh
  source scripts/lib/common.sh
  ccache_env
  [[ -d build/release ]] || cmake --preset release >/dev/null
  cmake --build --preset release -j"$(nproc)" --target xds_apply_bench >/dev/null
fi
[[ -x $bin ]] || { echo "xds_apply.sh: no benchmark binary at $bin" >&2; exit 1; }

lines=$(mktemp)
trap 'rm -f "$lines"' EXIT
for ((r = 1; r <= runs; r++)); do
  for size in "100000 10000" "10000 1000"; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    line=$("$bin" $size)
    echo "load=$load $line" | tee -a "$lines"
  done
done

# One summary line per size: medians of the figures the targets name, plus the CPU split.
awk '
  function field(name,   i, kv) {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
    return ""
  }
  function median(list, n,   sorted, i, j, t) {
    for (i = 1; i <= n; i++) sorted[i] = list[i]
    for (i = 2; i <= n; i++) for (j = i; j > 1 && sorted[j - 1] > sorted[j]; j--) { t = sorted[j]; sorted[j] = sorted[j - 1]; sorted[j - 1] = t }
    return n % 2 ? sorted[(n + 1) / 2] : (sorted[n / 2] + sorted[n / 2 + 1]) / 2
  }
  {
    w = field("workloads"); n = ++count[w]
    cpu[w, n] = field("cpu_s_per_100k"); wall[w, n] = field("apply_s") * 100000 / w
    bytes[w, n] = field("bytes_per_workload"); load[w, n] = field("load")
    conv[w, n] = field("convert_cpu_ms"); snap[w, n] = field("snapshot_cpu_ms")
  }
  END {
    for (w in count) {
      n = count[w]; lo = 1e9; hi = 0
      for (i = 1; i <= n; i++) {
        c[i] = cpu[w, i]; wl[i] = wall[w, i]; b[i] = bytes[w, i]; l[i] = load[w, i]; cv[i] = conv[w, i]; sn[i] = snap[w, i]
        if (c[i] < lo) lo = c[i]; if (c[i] > hi) hi = c[i]
      }
      printf "SUMMARY workloads=%s processes=%d cpu_s_per_100k min=%.3f median=%.3f max=%.3f wall_s_per_100k_median=%.3f " \
             "bytes_per_workload_median=%.0f convert_cpu_ms_median=%.0f snapshot_cpu_ms_median=%.0f load_median=%.2f\n",
             w, n, lo, median(c, n), hi, median(wl, n), median(b, n), median(cv, n), median(sn, n), median(l, n)
    }
  }' "$lines" | sort -t= -k2 -n
