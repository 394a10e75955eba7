#!/usr/bin/env bash
# bench/iperf_pods.sh HOST PORT SECONDS NETNS...: one iperf3 client (1 stream, client sends) in each
# given pod netns at once, pod i to HOST:PORT+i, for SECONDS. Prints the sum in run.sh's tput fields
# (gbps= bytes= secs= retrans=); exits non-zero if any client failed. Used by bench/run.sh.
set -uo pipefail
host=$1 port=$2 secs=$3
shift 3
dir=$(mktemp -d /tmp/mn-iperf-pods.XXXXXX)
trap 'rm -rf "$dir"' EXIT
pids=() i=0
for ns in "$@"; do
  ip netns exec "$ns" iperf3 -c "$host" -p $((port + i)) -t "$secs" -P 1 -J --connect-timeout 5000 >"$dir/$i.json" &
  pids+=($!) i=$((i + 1))
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
python3 - "$dir"/*.json <<'PY'
import json, sys
bps = b = secs = retr = 0
for path in sys.argv[1:]:
    try:
        e = json.load(open(path))["end"]
        r, s = e["sum_received"], e.get("sum_sent", {})
        bps += r["bits_per_second"]; b += r["bytes"]; secs = max(secs, r["seconds"]); retr += s.get("retransmits", 0)
    except Exception as ex:
        print("gbps=0 bytes=0 secs=0 retrans=0 error=%s" % type(ex).__name__); sys.exit(1)
print("gbps=%.3f bytes=%d secs=%.3f retrans=%d clients=%d" % (bps / 1e9, b, secs, retr, len(sys.argv) - 1))
PY
exit $(( rc || $? ))
