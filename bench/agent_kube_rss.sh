#!/usr/bin/env bash
# The node agent's memory with a Kubernetes cluster behind it (issue 13): meshnode-agent (the real
# binary, release build) against the fake API server (tests/fakes/kube_api_server.py) holding
# --pods pods spread over --nodes nodes, watching node-0's pods and all namespaces; VmRSS once its
# caches synced and it reports ready, next to the same agent against an empty cluster, same run.
# Needs root (the agent runs in a scratch netns so its host rules stay there).
# Usage: sudo bench/agent_kube_rss.sh [--pods 10000] [--nodes 100] [--encoding protobuf|json]
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pods=10000 nodes=100 encoding=protobuf
while (($#)); do
  case $1 in
    --pods) pods=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --encoding) encoding=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
agent=${MESHNODE_AGENT_BIN:-$repo/build/release/agent/meshnode-agent}
[[ -x $agent ]] || { echo "build meshnode-agent first (cmake --build --preset release --target meshnode-agent)" >&2; exit 2; }
work=$(mktemp -d /tmp/mn-kube-rss.XXXXXX)
ns=mn-$(printf '%06x' $((RANDOM * 32768 + RANDOM & 0xffffff)))-rss
declare -a pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$ns"
ip -n "$ns" link set lo up

# run <label> <pods>: one fake API server + one agent; prints the agent's VmRSS in KiB.
run() {
  local label=$1 count=$2 url port apid agentpid
  ip netns exec "$ns" python3 "$repo/tests/fakes/kube_api_server.py" --port 0 >"$work/api-$label.out" 2>"$work/api-$label.err" &
  apid=$!
  pids+=("$apid")
  until url=$(grep -oE 'http://[^ ]+' "$work/api-$label.out" 2>/dev/null); do sleep 0.05; done
  if ((count > 0)); then
    ip netns exec "$ns" curl -fsS -X POST "$url/fake/load" -H 'Content-Type: application/json' \
      -d "{\"count\": $count, \"nodes\": $nodes, \"namespace\": \"bench\", \"template\": {\"metadata\": {\"labels\": {\"app\": \"bench\"}, \"annotations\": {\"kubectl.kubernetes.io/last-applied-configuration\": \"$(printf 'x%.0s' {1..400})\"}}, \"spec\": {\"serviceAccountName\": \"bench\", \"containers\": [{\"name\": \"app\", \"image\": \"busybox\"}]}, \"status\": {\"phase\": \"Running\"}}}" >/dev/null
  fi
  cat >"$work/kubeconfig-$label" <<KC
apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "$url"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: fake, user: u}}]
current-context: c
KC
  port=$((20000 + RANDOM % 20000))
  ip netns exec "$ns" "$agent" --kubeconfig "$work/kubeconfig-$label" --node-name node-0 --kube-encoding "$encoding" \
    --plugin-socket "$work/$label/plugin.sock" --zds-socket "$work/$label/zds.sock" --run-dir "$work/$label/run" \
    --listen-host 127.0.0.1 --health-port "$port" --monitoring-port $((port + 1)) --log-level warn \
    2>"$work/agent-$label.log" &
  agentpid=$!
  pids+=("$agentpid")
  until ip netns exec "$ns" curl -fsS -m 1 -o /dev/null "http://127.0.0.1:$port/readyz" 2>/dev/null; do
    kill -0 "$agentpid" 2>/dev/null || { cat "$work/agent-$label.log" >&2; exit 1; }
    sleep 0.1
  done
  sleep 1 # let the first watch events and the status writer settle
  awk '/^VmRSS:/ {print $2}' "/proc/$agentpid/status"
  kill "$agentpid"; wait "$agentpid" 2>/dev/null || true
  kill "$apid"; wait "$apid" 2>/dev/null || true
}
empty=$(run empty 0)
loaded=$(run loaded "$pods")
printf 'meshnode-agent VmRSS, %s encoding, watching node-0 (fieldSelector spec.nodeName):\n' "$encoding"
printf '  %-44s %8d KiB\n' "empty cluster" "$empty"
printf '  %-44s %8d KiB\n' "$pods pods over $nodes nodes ($((pods / nodes)) on node-0)" "$loaded"
printf '  %-44s %8d KiB\n' "difference" $((loaded - empty))
