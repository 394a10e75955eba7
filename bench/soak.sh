#!/usr/bin/env bash
# Soak (issue 11): SOAK_CONNS (10,000) concurrent tunnelled connections for SOAK_SECONDS (600) on
# the simulated cluster (scripts/lib/cluster.sh: 2 nodes, client pod on node 1, server pod on
# node 2, both enrolled, HBONE between the nodes). Random sizes (0 B .. 1 MiB), half-closes both
# ways, client and server resets; every byte is checked both ways (bench/soak.py). Prints
# connections, bytes, lost (must be 0) and each proxy's RSS and fds before, at peak load and
# after the pools' idle release (SOAK_SETTLE seconds, default 330: idle_release is 5 min), and
# fails when lost > 0 or RSS/fds do not come back within 10 % of the start. Needs root.
#
# The start is the warmed proxy (3 s of 20 connections). SOAK_BURST=N first runs N seconds of the
# soak's own concurrency and waits for the pools' release, so that the start has seen the peak
# once. SOAK_ROUNDS=N repeats load + settle N times on the same proxies and prints RSS after each:
# memory that stays after round 1 but does not grow in later rounds is retained (allocator
# metadata, Asio's per-socket reactor state, kept for reuse), memory that grows per round leaks.
#
#   sudo bench/soak.sh                    # 10 minutes
#   sudo SOAK_SECONDS=60 SOAK_CONNS=2000 bench/soak.sh
#   sudo SOAK_HEAP=1 SOAK_ROUNDS=3 SOAK_SECONDS=240 bench/soak.sh   # + allocator totals, 3 rounds
set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$BENCH/.." && pwd)
source "$REPO/scripts/lib/common.sh"
source "$REPO/scripts/lib/cluster.sh"
ensure_root "${BASH_SOURCE[0]}" "$@"

: "${SOAK_SECONDS:=600}" "${SOAK_CONNS:=10000}" "${SOAK_SETTLE:=330}" "${SOAK_PORT:=7100}" "${SOAK_BURST:=0}" "${SOAK_ROUNDS:=1}"
PROXY_BIN=${MESHNODE_PROXY_BIN:-$REPO/build/release/src/app/meshnode-proxy}
if [[ ! -x $PROXY_BIN ]]; then
  build_proxy "$REPO" >&2 || { echo "soak: proxy build failed" >&2; exit 2; }
fi
log() { printf '[soak %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

RUN=$(mktemp -d /tmp/mn-soak.XXXXXX)
PREFIX=$(cluster_new_prefix)
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  cluster_down "$PREFIX" >/dev/null 2>&1 || true
  [[ ${SOAK_KEEP:-0} == 1 ]] || rm -rf "$RUN"
}
trap cleanup EXIT INT TERM

log "cluster $PREFIX: 2 nodes x 1 pod; run dir $RUN"
cluster_up "$PREFIX" 2 1 "$RUN/cluster" || { echo "soak: cluster_up failed" >&2; exit 2; }
get() { cluster_env_get "$RUN/cluster/cluster.env" "$1"; }
N1=$(get MN_NODE1_NETNS) N2=$(get MN_NODE2_NETNS) N1_IP=$(get MN_NODE1_IP) N2_IP=$(get MN_NODE2_IP)
C_NS=$(get MN_POD_1_0_NETNS) S_NS=$(get MN_POD_2_0_NETNS) S_IP=$(get MN_POD_2_0_IP)
for ns in $(cluster_netns_of "$PREFIX"); do
  ip netns exec "$ns" sysctl -qw net.ipv4.ip_local_port_range="10000 60999" 2>/dev/null
  ip netns exec "$ns" sysctl -qw net.ipv4.tcp_tw_reuse=1 2>/dev/null
  ip netns exec "$ns" sysctl -qw net.core.somaxconn=8192 2>/dev/null
done
cat >"$RUN/mesh.yaml" <<YAML
workloads:
- {uid: soak-client, name: soak-client, namespace: default, serviceAccount: client, workloadIps: ["$(get MN_POD_1_0_IP)"], protocol: HBONE, node: node1}
- {uid: soak-server, name: soak-server, namespace: default, serviceAccount: server, workloadIps: ["$S_IP"], protocol: HBONE, node: node2}
YAML

# The fd limit is raised for the test peers; the proxies raise their own soft limit to the hard one.
ulimit -Hn 1048576 2>/dev/null || true
start_proxy() { # $1 = node netns, $2 = pod uid, $3 = pod netns, $4 = node ip, $5 = label
  ip netns exec "$1" "$PROXY_BIN" --config "$RUN/mesh.yaml" --ca-dir "$RUN/ca" --pod "$2=/var/run/netns/$3" \
    --log-level warn >"$RUN/$5.out" 2>"$RUN/$5.log" &
  PIDS+=($!)
  wait_until 20 "$5 ready" ip netns exec "$1" curl -fsS -o /dev/null "http://$4:15021/healthz/ready" ||
    { echo "soak: $5 not ready: $(tail -c 400 "$RUN/$5.log")" >&2; exit 2; }
}
start_proxy "$N1" soak-client "$C_NS" "$N1_IP" proxy-node1
P1=${PIDS[-1]}
start_proxy "$N2" soak-server "$S_NS" "$N2_IP" proxy-node2
P2=${PIDS[-1]}

rss() { awk '$1 == "VmRSS:" {print $2}' "/proc/$1/status"; }
fds() { ls "/proc/$1/fd" | wc -l; }
anon() { awk '$1 == "RssAnon:" {print $2}' "/proc/$1/status"; }
# The allocator's own totals (admin /debug/memory): live bytes vs what the allocator keeps, and
# slack=<class>B:<live KiB>/<slab KiB> for the three size classes with the most slab beyond live,
# reactor_records=<created>/<deleted>/<waiting> (Asio's per-socket records, net/reactor_records.hpp).
heap() { # $1 = node netns, $2 = node ip
  ip netns exec "$1" curl -fsS "http://127.0.0.1:15000/debug/memory" 2>/dev/null |
    python3 -c '
import json, sys
d = json.load(sys.stdin)
# The three size classes whose slabs hold the most bytes beyond their live objects.
waste = sorted(d.get("bins", []), key=lambda b: b["used_bytes"] - b["slab_bytes"])[:3]
print("allocated=%d active=%d metadata=%d resident=%d" % (d["allocated_bytes"] >> 10, d["active_bytes"] >> 10,
      d["metadata_bytes"] >> 10, d["resident_bytes"] >> 10),
      "slack=" + ",".join("%dB:%d/%d" % (b["size"], b["used_bytes"] >> 10, b["slab_bytes"] >> 10) for b in waste),
      "reactor_records=%(created)d/%(destroyed)d/%(retired)d" % d["reactor_records"])
' 2>/dev/null
}
field() { # $1 = a snapshot line, $2 = a key -> its value
  echo "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k {print $2}'
}
snapshot() {
  echo "node1_rss_kib=$(rss "$P1") node1_fds=$(fds "$P1") node2_rss_kib=$(rss "$P2") node2_fds=$(fds "$P2")" \
    "node1_anon_kib=$(anon "$P1") node2_anon_kib=$(anon "$P2")"
  [[ ${SOAK_HEAP:-0} == 1 ]] && echo "heap_kib node1 $(heap "$N1") node2 $(heap "$N2")" >&2
  [[ ${SOAK_HEAP_PROFILE:-0} == 1 ]] && for ns in "$N1" "$N2"; do
    ip netns exec "$ns" curl -fsS -X POST "http://127.0.0.1:15000/debug/heap_profile" >&2
  done
  return 0
}

ip netns exec "$S_NS" bash -c "ulimit -n 1048576; exec python3 -u '$BENCH/soak.py' serve --port $SOAK_PORT" \
  >"$RUN/server.out" 2>"$RUN/server.err" &
SERVER=$!
PIDS+=("$SERVER")
wait_until 20 "soak server" grep -q ready "$RUN/server.out" || { echo "soak: server did not start" >&2; exit 2; }

# "Start" is the warmed proxy: a few seconds of the same traffic first, so that what the first
# connection creates for good (workload certificates, TLS contexts, library code paged in on first
# use) is in the baseline and the 10 % budget measures what the load itself leaves behind. The cold
# figure (no connection ever made) is printed too.
COLD=$(snapshot)
log "cold: $COLD"
ip netns exec "$C_NS" python3 -u "$BENCH/soak.py" run --host "$S_IP" --port "$SOAK_PORT" --conns 20 --seconds 3 \
  --ramp 1 >"$RUN/warmup.out" 2>"$RUN/warmup.err" || { echo "soak: warm-up failed: $(tail -c 400 "$RUN/warmup.err")" >&2; exit 2; }
WARM=$(snapshot)
log "warm (no peak yet): $WARM"
if ((SOAK_BURST > 0)); then
  log "burst: $SOAK_CONNS concurrent connections for $SOAK_BURST s, then the pools' idle release"
  ip netns exec "$C_NS" bash -c "ulimit -n 1048576; exec python3 -u '$BENCH/soak.py' run --host $S_IP --port $SOAK_PORT \
    --conns $SOAK_CONNS --seconds $SOAK_BURST" >"$RUN/burst.out" 2>"$RUN/burst.err" ||
    { echo "soak: burst failed: $(tail -c 400 "$RUN/burst.err")" >&2; exit 2; }
  log "burst: $(tail -n 1 "$RUN/burst.out")"
  released() { # the HBONE pools closed what the burst opened: fds back to the warm count (+2)
    (($(fds "$P1") <= $(field "$WARM" node1_fds) + 2 && $(fds "$P2") <= $(field "$WARM" node2_fds) + 2))
  }
  for ((t = 0; t < SOAK_SETTLE; t += 5)); do released && break; sleep 5; done
  sleep 35 # one more heap trim (every 30 s) after the release
fi
BEFORE=$(snapshot)
log "before: $BEFORE"
within() { # $1 = now, $2 = start -> true when now <= start * 1.1 (fds: + 2 for the accept backlog)
  awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b * 1.10 + 2) }'
}
settled() {
  within "$(rss "$P1")" "$(field "$BEFORE" node1_rss_kib)" && within "$(fds "$P1")" "$(field "$BEFORE" node1_fds)" &&
    within "$(rss "$P2")" "$(field "$BEFORE" node2_rss_kib)" && within "$(fds "$P2")" "$(field "$BEFORE" node2_fds)"
}
ROUND_AFTER=()
for ((round = 1; round <= SOAK_ROUNDS; round++)); do
  log "round $round/$SOAK_ROUNDS: $SOAK_CONNS concurrent connections for $SOAK_SECONDS s"
  ip netns exec "$C_NS" bash -c "ulimit -n 1048576; exec python3 -u '$BENCH/soak.py' run --host $S_IP --port $SOAK_PORT \
    --conns $SOAK_CONNS --seconds $SOAK_SECONDS" >"$RUN/client.out" 2>"$RUN/client.err" &
  CLIENT=$!
  PEAK="" peak1=0 peak2=0
  while kill -0 "$CLIENT" 2>/dev/null; do
    sleep 5
    r1=$(rss "$P1") r2=$(rss "$P2")
    ((r1 > peak1)) && peak1=$r1
    ((r2 > peak2)) && peak2=$r2
    PEAK="node1_rss_kib=$peak1 node2_rss_kib=$peak2 node1_fds_now=$(fds "$P1") node2_fds_now=$(fds "$P2")"
  done
  wait "$CLIENT"
  RESULT=$(tail -n 1 "$RUN/client.out")
  log "client: $RESULT"
  log "peak: $PEAK"
  lost=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['lost'])" "$RESULT" 2>/dev/null || echo unknown)
  if [[ $lost != 0 ]]; then # no settling: report the proxies as they are and fail below
    AFTER=$(snapshot) SETTLE_TIME=0
    ROUND_AFTER+=("$AFTER")
    log "round $round lost $lost connections: stopping"
    break
  fi
  log "waiting up to $SOAK_SETTLE s for the pools' idle release"
  for ((t = 0; t < SOAK_SETTLE; t += 5)); do settled && break; sleep 5; done
  AFTER=$(snapshot)
  SETTLE_TIME=$t
  ROUND_AFTER+=("$AFTER")
  log "after round $round: $AFTER"
done
kill -USR1 "$SERVER"
sleep 1
SERVER_TOTALS=$(grep server_conns "$RUN/server.out" | tail -n 1)

server_bad=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['server_bad'])" "$SERVER_TOTALS" 2>/dev/null || echo unknown)
echo "soak: seconds=$SOAK_SECONDS concurrent=$SOAK_CONNS rounds=$SOAK_ROUNDS"
echo "soak: client $RESULT"
echo "soak: server $SERVER_TOTALS"
echo "soak: cold   $COLD"
echo "soak: warm   $WARM (after 3 s of 20 connections)"
if ((SOAK_BURST > 0)); then
  echo "soak: before $BEFORE (the start: after a ${SOAK_BURST} s burst of $SOAK_CONNS connections and the pools' release)"
else
  echo "soak: before $BEFORE (the start: the warm proxy)"
fi
echo "soak: peak   $PEAK"
for ((i = 0; i < ${#ROUND_AFTER[@]}; i++)); do echo "soak: after round $((i + 1)): ${ROUND_AFTER[i]}"; done
echo "soak: after  $AFTER (after ${SETTLE_TIME}s of settling)"
rc=0
[[ $lost == 0 && $server_bad == 0 ]] || { echo "soak: FAIL lost=$lost server_bad=$server_bad"; rc=1; }
settled || { echo "soak: FAIL RSS or fds did not return within 10 % of the start"; rc=1; }
growth() { # $1 = field -> "after / start" of both proxies against both starts
  local f=$1
  awk -v f="$f" -v a="$(field "$AFTER" "$f")" -v b="$(field "$BEFORE" "$f")" -v w="$(field "$WARM" "$f")" 'BEGIN { printf "soak: %s after/start %+.1f %%, after/warm %+.1f %%\n", f, (a/b-1)*100, (a/w-1)*100 }'
}
growth node1_rss_kib
growth node2_rss_kib
[[ $rc == 0 ]] && echo "soak: PASS"
exit $rc
