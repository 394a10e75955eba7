#!/usr/bin/env bash
# Foundation figures for meshnode-proxy, measured in one run on the simulated cluster
# (2 nodes, 1 pod each, real in-pod capture):
#   - 1 GiB transfer (iperf3 -n 1G) pod→pod: direct TCP (redirection removed) vs through HBONE
#     (client pod → proxy node1 → mTLS HTTP/2 CONNECT → proxy node2 → server pod), ratio
#   - proxy RSS idle, and with 1,000 idle tunnelled connections (per-connection cost)
# Usage: sudo bench/foundation.sh   (REPS=3 by default; prints a table, exits non-zero on failure)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/scripts/lib/common.sh"
source "$repo/scripts/lib/cluster.sh"
ensure_root "${BASH_SOURCE[0]}" "$@"

REPS=${REPS:-3}
SIZE=${SIZE:-1G}
IDLE=${IDLE:-1000}
bin=${MESHNODE_PROXY_BIN:-$repo/build/release/src/app/meshnode-proxy}
[[ -x $bin ]] || build_proxy "$repo" >/dev/null
work=$(mktemp -d /tmp/mn-bench.XXXXXX)
prefix=$(cluster_new_prefix)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  pkill -f "$repo/bench/idle_conns.py" 2>/dev/null || true
  wait 2>/dev/null || true
  cluster_down "$prefix" || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

cluster_up "$prefix" 2 1 "$work"
env="$work/cluster.env"
get() { cluster_env_get "$env" "$1"; }
client=$(get MN_POD_1_0_NETNS) server=$(get MN_POD_2_0_NETNS)
client_ip=$(get MN_POD_1_0_IP) server_ip=$(get MN_POD_2_0_IP)
cat >"$work/config.yaml" <<YAML
workloads:
- {uid: bench-client, name: client, namespace: default, serviceAccount: client, workloadIps: ["$client_ip"], protocol: HBONE}
- {uid: bench-server, name: server, namespace: default, serviceAccount: server, workloadIps: ["$server_ip"], protocol: HBONE}
YAML
start_proxy() {  # <node> <uid> <netns>
  ip netns exec "$(get MN_NODE$1_NETNS)" "$bin" --config "$work/config.yaml" --ca-dir "$work/ca" \
    --pod "$2=/var/run/netns/$3" --log-level warn 2>"$work/proxy$1.log" &
  pids+=($!)
  wait_until 10 "proxy on node $1 ready" ip netns exec "$(get MN_NODE$1_NETNS)" \
    curl -fsS "http://$(get MN_NODE$1_IP):15021/healthz/ready"
}
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
start_proxy 1 bench-client "$client"
start_proxy 2 bench-server "$server"
proxy1=${pids[0]} proxy2=${pids[1]}

transfer_gbps() {  # prints Gbit/s of one iperf3 -n SIZE run client→server
  ip netns exec "$server" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  local srv=$!
  wait_until 5 "iperf3 server" ip netns exec "$server" sh -c "ss -ltn | grep -q ':5201 '"
  ip netns exec "$client" iperf3 -c "$server_ip" -p 5201 -n "$SIZE" -J |
    python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))'
  wait "$srv" 2>/dev/null || true
}
with_redirect() {  # on|off
  for ns in "$client" "$server"; do
    ip netns exec "$ns" nft delete table inet meshnode 2>/dev/null || true
    if [[ $1 == on ]]; then cluster_nft_ruleset | ip netns exec "$ns" nft -f -; fi
  done
}

idle1=$(rss_kb "$proxy1") idle2=$(rss_kb "$proxy2")
echo "rep direct_gbps hbone_gbps ratio"
ratios=()
for ((r = 1; r <= REPS; r++)); do
  with_redirect off; d=$(transfer_gbps)
  with_redirect on;  h=$(transfer_gbps)
  ratio=$(python3 -c "print('%.3f' % ($h/$d))")
  ratios+=("$ratio")
  echo "$r $d $h $ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')

# Idle tunnels: the server pod holds IDLE accepted connections, the client pod opens them.
base1=$(rss_kb "$proxy1") base2=$(rss_kb "$proxy2")
hold() {  # <netns> <args...>: runs idle_conns.py held open by a pipe, output to $work/<mode>.out
  local ns=$1 mode=$2
  shift
  (sleep 600 | ip netns exec "$ns" python3 "$repo/bench/idle_conns.py" "$@" >"$work/$mode.out") &
  pids+=($!)
}
hold "$server" serve 7000 "$IDLE"
wait_until 10 "idle server ready" grep -q ready "$work/serve.out"
hold "$client" open "$server_ip" 7000 "$IDLE"
wait_until 60 "$IDLE tunnelled connections accepted" grep -q "accepted $IDLE" "$work/serve.out"
busy1=$(rss_kb "$proxy1") busy2=$(rss_kb "$proxy2")
hbone_conns=$(ip netns exec "$client" ss -tnH state established "dport = :15008" | wc -l)


cat <<TXT

transfer ${SIZE}B, ${REPS} reps: median HBONE/direct throughput ratio = $median
proxy RSS idle (1 enrolled pod each):  node1 $((idle1 / 1024)) MiB ($idle1 KiB), node2 $((idle2 / 1024)) MiB ($idle2 KiB)
proxy RSS before / with $IDLE idle tunnelled connections: node1 $base1 / $busy1 KiB, node2 $base2 / $busy2 KiB
  per idle connection: node1 $(( (busy1 - base1) * 1024 / IDLE )) B, node2 $(( (busy2 - base2) * 1024 / IDLE )) B; HBONE TCP connections used: $hbone_conns
TXT
