#!/usr/bin/env bash
# Time from CNI ADD to ready pod (issue 4 closing figure): one simulated node running the real
# meshnode-agent (nftables) and meshnode-proxy (shared mode); N pods (default 50) are created one
# at a time through the node's CNI chain (bridge + host-local, then meshnode-cni, executed by
# scripts/lib/cni.sh). meshnode-cni's ADD returns only after the agent programmed the pod's rules
# and the proxy acknowledged the pod (its listeners run in the pod netns), so the chain's return
# is "pod ready". Reports median / p99 / max of
#   chain      the whole chain as a runtime runs it (bridge + host-local + meshnode-cni, process starts)
#   meshnode   the meshnode-cni step alone (plugin start → agent → rules → ZDS Add → Ack → result)
# and prints the ruleset of one enrolled pod as the agent programmed it (`nft list ruleset` in its
# netns), and the policy-routing rule. Removes everything it created.
# Usage: sudo bench/cni_add_latency.sh   (CNI_LATENCY_PODS=N; MESHNODE_PROXY_BIN / MESHNODE_AGENT_BIN
#        / MESHNODE_CNI_BIN override the binaries, else the release preset builds them)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/scripts/lib/common.sh"
source "$repo/scripts/lib/cluster.sh"
source "$repo/scripts/lib/cni.sh"
ensure_root "${BASH_SOURCE[0]}" "$@"

pods=${CNI_LATENCY_PODS:-50}
proxy_bin=${MESHNODE_PROXY_BIN:-} agent_bin=${MESHNODE_AGENT_BIN:-} cni_bin=${MESHNODE_CNI_BIN:-}
declare -a targets=()
[[ -n $proxy_bin ]] || { targets+=(meshnode-proxy); proxy_bin="$repo/build/release/src/app/meshnode-proxy"; }
[[ -n $agent_bin ]] || { targets+=(meshnode-agent); agent_bin="$repo/build/release/agent/meshnode-agent"; }
[[ -n $cni_bin ]] || { targets+=(meshnode-cni); cni_bin="$repo/build/release/cni/meshnode-cni"; }
if ((${#targets[@]})); then build_release "$repo" "${targets[@]}" >/dev/null; fi
export MESHNODE_CNI_BIN=$cni_bin

prefix=$(cluster_new_prefix)
work=$(mktemp -d "${TMPDIR:-/tmp}/meshnode-cni-bench.XXXXXX")
declare -a pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  cluster_down "$prefix" || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cluster_up "$prefix" 1 0 "$work"
node="$prefix-node1"
mkdir -p "$work/node1"
printf 'enrollNamespaces: [default]\n' >"$work/enrollment.yaml"
printf 'workloads: []\n' >"$work/meshnode.yaml"
ip netns exec "$node" "$agent_bin" --plugin-socket "$work/node1/plugin.sock" --zds-socket "$work/node1/zds.sock" \
  --run-dir "$work/node1/run" --policy "$work/enrollment.yaml" --log-level warn 2>"$work/agent.log" &
pids+=($!)
wait_until 30 "agent ready" ip netns exec "$node" curl -fsS -m 1 -o /dev/null http://198.18.0.1:8000/readyz
ip netns exec "$node" "$proxy_bin" --config "$work/meshnode.yaml" --ca-dir "$work/ca" --log-level warn \
  --inpod-uds "$work/node1/zds.sock" --transparent-inbound 2>"$work/proxy.log" &
pids+=($!)
wait_until 30 "proxy ready" ip netns exec "$node" curl -fsS -m 1 -o /dev/null http://198.18.0.1:15021/healthz/ready
cni_node_setup "$work" 1 "$work/node1/plugin.sock"

export CNI_EXEC_TIMING=1
: >"$work/chain.ms"
: >"$work/meshnode.ms"
for ((i = 0; i < pods; i++)); do
  netns="$prefix-n1-b$i"
  ip netns add "$netns"
  ip -n "$netns" link set lo up
  args="IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=b$i;K8S_POD_UID=bench-$i"
  t0=$(date +%s%N)
  cni_chain "$work" 1 ADD "bench-$i" "/var/run/netns/$netns" "$args" >/dev/null 2>"$work/timing"
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000)) >>"$work/chain.ms"
  awk '/ADD meshnode-cni/ {print int($4 * 1000)}' "$work/timing" >>"$work/meshnode.ms"
done

stats() { # file of microseconds -> "median X ms, p99 Y ms, max Z ms"
  sort -n "$1" | awk '{v[NR] = $1} END {
    p = int(0.99 * NR + 0.999); if (p < 1) p = 1
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "median %.1f ms, p99 %.1f ms, max %.1f ms (n=%d)\n", m / 1000, v[p] / 1000, v[NR] / 1000, NR }'
}
echo "CNI ADD -> ready pod over $pods pods, one at a time (nftables backend):"
echo "  chain (bridge + host-local + meshnode-cni, as a runtime runs it): $(stats "$work/chain.ms")"
echo "  meshnode-cni step (agent: rules + ZDS Add -> proxy Ack):          $(stats "$work/meshnode.ms")"
enrolled=$(ip netns exec "$node" curl -sS -m 2 http://198.18.0.1:15014/metrics | awk '/^meshnode_agent_enrolled_pods /{print $2}')
echo "  agent meshnode_agent_enrolled_pods = $enrolled"
echo
echo "ruleset of pod b0 as the agent programmed it (ip netns exec $prefix-n1-b0 nft list ruleset):"
ip netns exec "$prefix-n1-b0" nft list ruleset
echo "policy routing in pod b0:"
ip netns exec "$prefix-n1-b0" ip rule list | grep -F 'lookup 100'
ip netns exec "$prefix-n1-b0" ip route show table 100
