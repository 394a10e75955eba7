#!/usr/bin/env bash
# meshnode's main job, end to end: two simulated nodes, each running meshnode-agent (the CNI node
# agent) and meshnode-proxy (shared mode, pods handed over by the agent over ZDS). Four pods are
# created the way a container runtime creates them: a netns, then the node's CNI chain (`bridge` +
# `host-local`, then `meshnode-cni`), whose ADD returns only once the agent programmed the pod's
# redirection and the proxy acknowledged it. A pod on node 1 curls an HTTP server in a pod on node 2:
# the proxies carry it over HBONE (mutual TLS with SPIFFE identities) and node 2's proxy connects to
# the server from the client pod's own IP. It also curls a plain-TCP (non-mesh-protocol) pod on node
# 2, and a second port of the server pod that an authorization policy (default/deny-admin-port)
# denies. The agents take enrollment and pod identities from a Kubernetes API (the fake API server
# of tests/fakes, driven with kubectl): namespace default is labelled istio.io/dataplane-mode=ambient,
# and a fifth pod that opted out (label none) is enrolled live by `kubectl label`, its traffic going
# from plaintext to mutual TLS. Finally one pod is deleted through the chain's DEL and its rules
# and listeners go away.
# The script prints the responses and the evidence (metrics, access logs, rules), checks every fact,
# exits 0 only if all hold, and always removes what it created.
#
# --control-plane: the proxies get no local config and no built-in CA: workloads, policy and
# certificates come from meshnode-fake-istiod over xDS and the Istio CA protocol
# (scripts/lib/demo_control_plane.sh); the same evidence is checked, plus the xDS and CA state.
# Needs root (network namespaces); re-runs itself through sudo if needed.
# MESHNODE_PROXY_BIN / MESHNODE_AGENT_BIN / MESHNODE_CNI_BIN=/path/to/binary skip building that
# binary; the others are built with the release preset (build/release).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/scripts/lib/common.sh"
source "$repo/scripts/lib/cluster.sh"
source "$repo/scripts/lib/cni.sh"
source "$repo/scripts/lib/demo_kube.sh"
ensure_root "${BASH_SOURCE[0]}" "$@"
control_plane=0
[[ ${1:-} == --control-plane ]] && control_plane=1

t_start=$(date +%s.%N)
say() { printf '\n== %s\n' "$*"; }
die() { printf '\nDEMO FAILED: %s\n' "$*" >&2; exit 1; }

# ---------------------------------------------------------------------------------------- build
proxy_bin=${MESHNODE_PROXY_BIN:-} agent_bin=${MESHNODE_AGENT_BIN:-} cni_bin=${MESHNODE_CNI_BIN:-}
declare -a targets=()
[[ -n $proxy_bin ]] || { targets+=(meshnode-proxy); proxy_bin="$repo/build/release/src/app/meshnode-proxy"; }
[[ -n $agent_bin ]] || { targets+=(meshnode-agent); agent_bin="$repo/build/release/agent/meshnode-agent"; }
[[ -n $cni_bin ]] || { targets+=(meshnode-cni); cni_bin="$repo/build/release/cni/meshnode-cni"; }
if ((control_plane)); then
  source "$repo/scripts/lib/demo_control_plane.sh"
  [[ -n ${MESHNODE_FAKE_ISTIOD_BIN:-} ]] || targets+=(meshnode-fake-istiod)
fi
if ((${#targets[@]})); then
  say "building ${targets[*]} (release preset)"
  bash "$repo/scripts/install-deps.sh"
  build_release "$repo" "${targets[@]}" || die "build failed"
fi
[[ -x $proxy_bin ]] || die "no executable proxy at $proxy_bin"
[[ -x $agent_bin ]] || die "no executable agent at $agent_bin"
[[ -x $cni_bin ]] || die "no executable CNI plugin at $cni_bin"
export MESHNODE_CNI_BIN=$cni_bin
t_built=$(date +%s.%N)

# ------------------------------------------------------------------------------ state + teardown
prefix=$(cluster_new_prefix)
work=$(mktemp -d "${TMPDIR:-/tmp}/meshnode-demo.XXXXXX")
declare -a proxy_pids=() agent_pids=() server_pids=()
demo_ok=0

teardown() {
  local rc=$?
  trap - EXIT INT TERM
  local pid
  for pid in "${server_pids[@]}" "${proxy_pids[@]}" "${agent_pids[@]}" ${kube_pid:-}; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${proxy_pids[@]}" "${agent_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if ((rc != 0 || demo_ok == 0)); then
    local f
    for f in "$work"/agent-node*.log "$work"/proxy-node*.log; do
      [[ -f $f ]] || continue
      printf '\n--- last lines of %s ---\n' "$(basename "$f")" >&2
      tail -n 25 "$f" >&2
    done
  fi
  cluster_down "$prefix" || echo "warning: could not remove every $prefix-* namespace" >&2
  rm -rf "$work"
  exit "$rc"
}
trap teardown EXIT
trap 'echo "interrupted" >&2; exit 130' INT TERM

# ---------------------------------------------------------------------------------------- cluster
say "creating the simulated cluster $prefix (fabric bridge, 2 nodes; pods come from the CNI chain)"
cluster_up "$prefix" 2 0 "$work" || die "could not create the cluster"
env_file="$work/cluster.env"
get() { cluster_env_get "$env_file" "$1"; }

node_ns=("" "$(get MN_NODE1_NETNS)" "$(get MN_NODE2_NETNS)")
node_ip=("" "$(get MN_NODE1_IP)" "$(get MN_NODE2_IP)")
# host-local hands out each node's range from .10 in creation order (fresh dataDir), so the
# addresses are known before the pods exist; cni_pod_add's result is checked against them below.
client_ip=198.19.1.10 client2_ip=198.19.1.11 server_ip=198.19.2.10 legacy_ip=198.19.2.11
app_port=8080
admin_port=8081 # denied by the Deny policy default/deny-admin-port
td=cluster.local
client_id="spiffe://$td/ns/default/sa/client"
server_id="spiffe://$td/ns/default/sa/server"

# ---------------------------------------------------------------------------------- Kubernetes API
# The agents take enrollment and identity from the API: namespace default is labelled ambient; the
# late pod opts out with the pod label none until it is relabelled live below.
late_ip=198.19.1.12
say "starting the Kubernetes API (tests/fakes/kube_api_server.py) in node1's netns; namespace and pods with kubectl"
kube_start "$work" "${node_ns[1]}" "${node_ip[1]}" || die "the fake Kubernetes API server did not start"
kc label namespace default istio.io/dataplane-mode=ambient --overwrite >/dev/null 2>&1 ||
  kube_namespace default istio.io/dataplane-mode=ambient || die "could not create namespace default"
declare -A pod_uid=()
for spec in client:1 client2:1 server:2 legacy:2 late:1:none; do
  IFS=: read -r name n mode <<<"$spec"
  pod_uid[$name]=$(kube_pod default "$name" "node$n" "$name" ${mode:+istio.io/dataplane-mode=$mode}) ||
    die "could not create pod $name in the API"
done
echo "  API $kube_url: namespace default (istio.io/dataplane-mode=ambient); pods client client2 late (node1), server legacy (node2); late labelled none"
kc get pods -n default -o wide 2>/dev/null | sed 's/^/  /' || true

# ---------------------------------------------------------------------------------------- config
workload() { # name sa ip protocol node [services-line]
  cat <<EOF
- uid: ${pod_uid[$1]}
  name: $1
  namespace: default
  serviceAccount: $2
  workloadIps: ["$3"]
  protocol: $4
  node: $5
EOF
  [[ -z ${6:-} ]] || echo "  services: $6"
  [[ -z ${7:-} ]] || echo "  authorizationPolicies: $7"
}
config="$work/meshnode.yaml"
{
  echo "workloads:"
  workload client client "$client_ip" HBONE node1
  workload client2 client2 "$client2_ip" HBONE node1
  workload server server "$server_ip" HBONE node2 "{\"default/server.default.svc.cluster.local\": {80: $app_port}}" \
    '["default/deny-admin-port"]'
  workload legacy legacy "$legacy_ip" TCP node2
  workload late late "$late_ip" HBONE node1
  cat <<EOF
services:
- name: server
  namespace: default
  hostname: server.default.svc.cluster.local
  vips: ["/198.19.200.10"]
  ports: {80: $app_port}
policies:
- name: deny-admin-port
  namespace: default
  scope: WorkloadSelector
  action: Deny
  rules: [[[{destinationPorts: [$admin_port]}]]]
EOF
} >"$config"

# ---------------------------------------------------------------------------------- agents + proxies
wait_pid_ready() { # pid description probe-cmd...
  local pid=$1 what=$2 deadline=$((SECONDS + 30))
  shift 2
  until "$@" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || die "$what exited during start-up (log below)"
    ((SECONDS < deadline)) || die "$what not ready after 30s"
    sleep 0.05
  done
}
probe() { ip netns exec "${node_ns[$1]}" curl -fsS -m 1 -o /dev/null "$2"; }
start_agent() { # node
  local n=$1 d="$work/node$1"
  mkdir -p "$d"
  ip netns exec "${node_ns[$n]}" "$agent_bin" --plugin-socket "$d/plugin.sock" --zds-socket "$d/zds.sock" \
    --run-dir "$d/run" --kubeconfig "$work/kubeconfig" --node-name "node$n" --log-level info \
    2>"$work/agent-node$n.log" >&2 &
  agent_pids[$n]=$!
  wait_pid_ready "${agent_pids[$n]}" "meshnode-agent on node$n" probe "$n" "http://${node_ip[$n]}:8000/readyz"
  echo "  node$n: meshnode-agent pid ${agent_pids[$n]} ready (${node_ip[$n]}:8000/readyz = 200; watching the API for node$n's pods; plugin and ZDS sockets in a temp dir)"
}
start_proxy() { # node
  local n=$1
  local -a source_args=(--config "$config" --ca-dir "$work/ca") env_args=()
  if ((control_plane)); then source_args=(); mapfile -t env_args < <(cp_proxy_env "$n"); fi
  ip netns exec "${node_ns[$n]}" env "${env_args[@]}" "$proxy_bin" "${source_args[@]}" --log-level info \
    --inpod-uds "$work/node$n/zds.sock" --transparent-inbound 2>"$work/proxy-node$n.log" >&2 &
  proxy_pids[$n]=$!
  wait_pid_ready "${proxy_pids[$n]}" "meshnode-proxy on node$n" probe "$n" "http://${node_ip[$n]}:15021/healthz/ready"
  echo "  node$n: meshnode-proxy pid ${proxy_pids[$n]} ready (shared mode: ZDS client of the node's agent; --transparent-inbound)"
}
# Sequential start: the first proxy creates the shared root CA in $work/ca, the second loads it.
say "starting meshnode-agent and meshnode-proxy on each node (shared built-in CA in a temp dir)"
if ((control_plane)); then
  say "control plane: meshnode-fake-istiod (xDS + Istio CA over gRPC/TLS) on node1; the proxies get no local config"
  cp_write_resources
  cp_start
fi
for n in 1 2; do
  start_agent "$n"
  start_proxy "$n"
  cni_node_setup "$work" "$n" "$work/node$n/plugin.sock"
done

# ---------------------------------------------------------------------------------------- pods
declare -A pod_ns=() pod_ip=()
create_pod() { # node pod expected-ip
  local n=$1 pod=$2 t0 t1 ip
  t0=$(date +%s%N)
  ip=$(cni_pod_add "$work" "$n" "$pod" default "${pod_uid[$pod]}") || die "CNI ADD of pod $pod on node$n failed"
  t1=$(date +%s%N)
  [[ $ip == "$3" ]] || die "pod $pod got $ip from host-local, expected $3"
  kube_pod_running default "$pod" "$ip" || die "could not patch the status of pod $pod"  # as the kubelet does
  pod_ns[$pod]=$(cni_pod_get "$work" "$pod" NETNS)
  pod_ip[$pod]=$ip
  printf '  %-8s %-13s node%s  netns %s  CNI ADD took %d ms\n' "$pod" "$ip" "$n" "${pod_ns[$pod]}" \
    $(((t1 - t0) / 1000000))
}
say "creating 5 pods through each node's CNI chain: bridge + host-local, then meshnode-cni (ADD returns after the proxy's Ack)"
create_pod 1 client "$client_ip"
create_pod 1 client2 "$client2_ip"
create_pod 2 server "$server_ip"
create_pod 2 legacy "$legacy_ip"
create_pod 1 late "$late_ip"
client_ns=${pod_ns[client]} server_ns=${pod_ns[server]} legacy_ns=${pod_ns[legacy]} client2_ns=${pod_ns[client2]}
late_ns=${pod_ns[late]}
# The late pod's process: the agent finds a running pod's netns by the processes in it.
ip netns exec "$late_ns" sleep 3600 &
server_pids+=($!)

say "the client pod's netns as the agent programmed it (nft table, policy routing, proxy listeners)"
ip netns exec "$client_ns" nft list table inet meshnode | sed 's/^/  /'
ip netns exec "$client_ns" ip rule list | grep -F 'lookup 100' | sed 's/^/  ip rule: /' || true
ip netns exec "$client_ns" ss -ltnH | awk '{print $4}' | sort -u | paste -sd' ' | sed 's/^/  listening: /'

# ---------------------------------------------------------------------------------------- apps
start_http_server() { # netns name [port]
  local port=${3:-$app_port} dir="$work/www-$2-${3:-$app_port}"
  mkdir -p "$dir"
  echo "hello from the $2 pod (meshnode demo)" >"$dir/index.html"
  ip netns exec "$1" python3 -m http.server "$port" --directory "$dir" >"$work/http-$2-$port.log" 2>&1 &
  server_pids+=($!)
  wait_until 10 "python3 -m http.server :$port listening in the $2 pod" \
    bash -c "ip netns exec '$1' ss -ltnH 'sport = :$port' | grep -q LISTEN" || die "HTTP server :$port in $2 pod did not start"
}
say "starting python3 -m http.server :$app_port in the server and legacy pods, and :$admin_port in the server pod"
start_http_server "$server_ns" server
start_http_server "$legacy_ns" legacy
start_http_server "$server_ns" server "$admin_port"

# ---------------------------------------------------------------------------------------- traffic
declare -a failures=()
fact() { # description cmd... : records a failed fact instead of stopping, so all are reported
  local what=$1
  shift
  if "$@"; then echo "  [ok]   $what"; else echo "  [FAIL] $what"; failures+=("$what"); fi
}
curl_from_client() { # url outfile -> prints http code
  ip netns exec "$client_ns" curl -sS -m 10 -o "$2" -w '%{http_code}' "$1" 2>"$2.err" || true
}

say "client pod ($client_ip, node1) -> curl http://$server_ip:$app_port/  (server pod, node2, HBONE)"
code_server=$(curl_from_client "http://$server_ip:$app_port/" "$work/resp-server")
echo "  HTTP status: ${code_server:-none} $(cat "$work/resp-server.err")"
echo "  body: $(head -c 200 "$work/resp-server" 2>/dev/null)"

say "client pod ($client_ip, node1) -> curl http://$legacy_ip:$app_port/  (legacy pod, node2, plain TCP)"
code_legacy=$(curl_from_client "http://$legacy_ip:$app_port/" "$work/resp-legacy")
echo "  HTTP status: ${code_legacy:-none} $(cat "$work/resp-legacy.err")"
echo "  body: $(head -c 200 "$work/resp-legacy" 2>/dev/null)"

say "client pod ($client_ip, node1) -> curl http://$server_ip:$admin_port/  (server pod; Deny policy default/deny-admin-port)"
code_admin=$(curl_from_client "http://$server_ip:$admin_port/" "$work/resp-admin")
echo "  HTTP status: ${code_admin:-none} $(cat "$work/resp-admin.err")"

# ---------------------------------------------------------------------------------------- evidence
metrics() { ip netns exec "${node_ns[$1]}" curl -sS -m 2 "http://${node_ip[$1]}:15020/metrics" 2>/dev/null; }
# metric_sum <node> <metric> <label="value">...: sum over the node's series carrying all labels.
metric_sum() {
  local n=$1 name=$2 lines label
  shift 2
  lines=$(metrics "$n" | grep -E "^${name}\{" || true)
  for label in "$@"; do lines=$(grep -F -- "$label" <<<"$lines" || true); done
  awk 'NF {s += $NF} END {print s + 0}' <<<"$lines"
}
metric_ge1() { (($(metric_sum "$@") >= 1)); }
metric_at_least_1() { wait_until 5 "metric $*" metric_ge1 "$@"; }
log_matches() { # file needle...: some access-log line contains every needle
  local l
  l=$(grep -F access "$1") || return 1
  shift
  local x
  for x; do l=$(grep -F -- "$x" <<<"$l") || return 1; done
}
log_has() { # node needle...
  local n=$1
  shift
  wait_until 5 "node$n access log line with $*" log_matches "$work/proxy-node$n.log" "$@"
}
# pick_fields <field-regex>...: keeps only the named key=value fields of each input line.
pick_fields() {
  local re
  re=$(IFS='|'; echo "$*")
  while IFS= read -r line; do
    grep -oE "(^| |\{|,)($re)=(\"[^\"]*\"|[^ ,}]*)" <<<"$line" | sed -E 's/^[ {,]//' | paste -sd' '
  done
}
show_series() { # node needle: istio_tcp_* series of one reporter, reduced to the telling labels
  local line
  metrics "$1" | grep -E '^istio_tcp_' | grep -F -- "$2" | while IFS= read -r line; do
    printf '    %-36s %s = %s\n' "${line%%\{*}" \
      "$(pick_fields 'source_principal|destination_workload|destination_principal|connection_security_policy|response_flags' <<<"$line")" \
      "${line##* }"
  done
}
opened=istio_tcp_connections_opened_total
mtls='connection_security_policy="mutual_tls"'
plain='connection_security_policy="unknown"'
src_p="source_principal=\"$client_id\"" dst_p="destination_principal=\"$server_id\""

say "checks"
fact "server pod answered HTTP 200 through meshnode" test "$code_server" = 200
fact "server response body is the server pod's page" grep -q "hello from the server pod" "$work/resp-server"
fact "node2 proxy (reporter=destination) counted a mutual_tls connection from $client_id to $server_id" \
  metric_at_least_1 2 "$opened" 'reporter="destination"' "$src_p" "$dst_p" "$mtls"
fact "node1 proxy (reporter=source) counted a mutual_tls connection from $client_id to $server_id" \
  metric_at_least_1 1 "$opened" 'reporter="source"' "$src_p" "$dst_p" "$mtls"
fact "node1 access log: outbound connection client -> server with both SPIFFE identities" \
  log_has 1 "src.identity=\"$client_id\"" "dst.identity=\"$server_id\""
fact "node2 access log: inbound connection client -> server with both SPIFFE identities" \
  log_has 2 "src.identity=\"$client_id\"" "dst.identity=\"$server_id\""
fact "legacy pod answered HTTP 200 through meshnode" test "$code_legacy" = 200
fact "legacy response body is the legacy pod's page" grep -q "hello from the legacy pod" "$work/resp-legacy"
fact "node1 proxy (reporter=source) counted a plain TCP connection (connection_security_policy=unknown) to legacy" \
  metric_at_least_1 1 "$opened" 'reporter="source"' 'destination_workload="legacy"' "$plain"
fact "node2 proxy (reporter=destination) counted a plain TCP connection to legacy" \
  metric_at_least_1 2 "$opened" 'reporter="destination"' 'destination_workload="legacy"' "$plain"
fact "no mutual_tls connection was counted towards legacy" \
  test "$(metric_sum 1 "$opened" 'destination_workload="legacy"' "$mtls")" = 0

# The denied request: the curl gets no HTTP response, node2 names the deciding policy.
deny_reason='explicitly denied by: default/deny-admin-port'
authz_url="http://127.0.0.1:15000/debug/authz?src=$client_ip&src_identity=$client_id&dst=$server_ip:$admin_port"
authz_json=$(ip netns exec "${node_ns[2]}" curl -sS -m 2 "$authz_url" 2>&1 || true)
authz_field() { python3 -c 'import json,sys; print(json.load(sys.stdin).get(sys.argv[1], ""))' "$1" <<<"$authz_json" 2>/dev/null; }
fact "curl to the server pod's port $admin_port got no HTTP response (connection refused by policy)" \
  test "${code_admin:-000}" = 000
fact "the app on port $admin_port never saw the request" \
  bash -c "! grep -q 'GET /' '$work/http-server-$admin_port.log'"
fact "node2 access log: client -> server:$admin_port refused, reason \"$deny_reason\"" \
  log_has 2 "src.identity=\"$client_id\"" "dst.addr=$server_ip:$admin_port" "error=\"policy_denied: $deny_reason\""
fact "node2 proxy (reporter=destination) counted the refused connection with response_flags=\"DENY\"" \
  metric_at_least_1 2 istio_tcp_connections_closed_total 'reporter="destination"' 'response_flags="DENY"' "$src_p" "$dst_p"
fact "node2 /debug/authz: decision deny, decidingPolicy default/deny-admin-port" \
  test "$(authz_field decision) $(authz_field decidingPolicy)" = "deny default/deny-admin-port"

# Transparent inbound: node 2's proxy connected to the server from the client pod's own IP, so the
# app's access log (python3 http.server: "<peer ip> - - [...] \"GET / HTTP/1.1\" 200 -") names it.
fact "server pod's access log shows the client pod's IP $client_ip as the source of GET /" \
  awk -v ip="$client_ip" '$1 == ip && /"GET \/ HTTP\/1\.1" 200/ {f = 1} END {exit !f}' "$work/http-server-$app_port.log"

if ((control_plane)); then cp_checks; fi

say "evidence: node1 proxy /metrics (reporter=source)"
show_series 1 'reporter="source"'
say "evidence: node2 proxy /metrics (reporter=destination)"
show_series 2 'reporter="destination"'
say "evidence: access log lines"
for n in 1 2; do
  grep -F access "$work/proxy-node$n.log" |
    pick_fields 'src\.addr|src\.identity|dst\.addr|dst\.hbone_addr|dst\.workload|dst\.identity|direction|bytes_sent|bytes_recv|duration|error' |
    sed "s/^/  node$n: /"
done
say "evidence: the denied request (client -> server:$admin_port)"
echo "  node2 access log reason: $(grep -F access "$work/proxy-node2.log" | grep -F "dst.addr=$server_ip:$admin_port" |
  grep -oE 'error="[^"]*"' | head -n 1)"
echo "  node2 GET /debug/authz?src=$client_ip&src_identity=$client_id&dst=$server_ip:$admin_port"
python3 -c '
import json, sys
try:
    j = json.load(sys.stdin)
except ValueError:
    print("    (not JSON)"); sys.exit(0)
print("    decision=%s decidingPolicy=%s reason=\"%s\"" % (j.get("decision"), j.get("decidingPolicy"), j.get("reason")))
for p in j.get("policies", []):
    print("    policy %s (%s%s): applies=%s matched=%s  %s" % (p["policy"], p["action"], ", dry-run" if p["dryRun"] else "",
          p["applies"], p["matched"], p["detail"]))
' <<<"$authz_json"

say "evidence: the server app's own access log (source address as the app sees it)"
sed 's/^/  /' "$work/http-server-$app_port.log"

# ---------------------------------------------------------------------------------------- live enrollment
# The late pod runs outside the mesh (pod label none). Relabelling it with kubectl enrolls it live:
# the agent finds its netns, programs it, hands it to node1's proxy and annotates the pod.
late_id="spiffe://$td/ns/default/sa/late"
late_src="source_principal=\"$late_id\""
curl_from_late() { ip netns exec "$late_ns" curl -sS -m 10 -o /dev/null -w '%{http_code}' "http://$server_ip:$app_port/" 2>/dev/null || true; }
plain_to_server() { metric_sum 2 "$opened" 'reporter="destination"' 'destination_workload="server"' "$plain"; }
late_annotated() { [[ $(kube_annotation default late) == enabled ]]; }
late_table() { ip netns exec "$late_ns" nft list table inet meshnode >/dev/null 2>&1; }
say "live enrollment: the late pod ($late_ip, node1, label istio.io/dataplane-mode=none) curls the server, then is relabelled"
plain_before=$(plain_to_server)
code_late_plain=$(curl_from_late)
echo "  before: HTTP ${code_late_plain:-none}, annotation ambient.istio.io/redirection=\"$(kube_annotation default late)\""
fact "late pod (not enrolled) reached the server in plaintext: HTTP 200" test "$code_late_plain" = 200
plain_grew() { (($(plain_to_server) >= plain_before + 1)); }
fact "node2 proxy counted it as plaintext (connection_security_policy=unknown): $plain_before -> $((plain_before + 1))+" \
  wait_until 5 "plaintext connection to server counted" plain_grew
fact "no nft table in the late pod's netns yet" bash -c "! ip netns exec '$late_ns' nft list table inet meshnode >/dev/null 2>&1"
echo "  \$ kubectl label pod late istio.io/dataplane-mode-    (back to the namespace's ambient label)"
kc label pod late -n default istio.io/dataplane-mode- | sed 's/^/  /'
fact "agent annotated the pod ambient.istio.io/redirection=enabled" wait_until 10 "late annotation" late_annotated
fact "agent programmed the late pod's netns (nft table inet meshnode)" late_table
code_late_mtls=$(curl_from_late)
echo "  after: HTTP ${code_late_mtls:-none}, annotation ambient.istio.io/redirection=\"$(kube_annotation default late)\""
fact "late pod (enrolled live) reached the server: HTTP 200" test "$code_late_mtls" = 200
fact "node2 proxy counted a mutual_tls connection from $late_id to $server_id" \
  metric_at_least_1 2 "$opened" 'reporter="destination"' "$late_src" "$dst_p" "$mtls"
fact "node1 access log: outbound late -> server with both SPIFFE identities" \
  log_has 1 "src.identity=\"$late_id\"" "dst.identity=\"$server_id\""
grep -E 'enrolled live' "$work/agent-node1.log" | tail -n 1 | sed 's/^/  agent node1: /' || true

# ---------------------------------------------------------------------------------------- pod deletion
# The runtime's order: the chain's DEL (meshnode-cni, then bridge) while the netns still exists, then
# the netns goes away. Checked in between: the agent removed its rules, the proxy its listeners.
has_table() { ip netns exec "$client2_ns" nft list table inet meshnode >/dev/null 2>&1; }
has_route_rule() { ip netns exec "$client2_ns" ip rule list | grep -q 'lookup 100'; }
listeners() { ip netns exec "$client2_ns" ss -ltnH | awk '{print $4}' | grep -oE ':(15001|15006|15008)$' | sort -u | wc -l; }
before_del_ok() { has_table && has_route_rule && [[ $(listeners) == 3 ]]; }
no_table() { ! has_table; }
no_route_rule() { ! has_route_rule; }
no_listeners() { [[ $(listeners) == 0 ]]; }
no_eth0() { ! ip -n "$client2_ns" link show eth0 >/dev/null 2>&1; }
enrolled() { ip netns exec "${node_ns[1]}" curl -sS -m 2 "http://${node_ip[1]}:15014/metrics" 2>/dev/null |
  awk '/^meshnode_agent_enrolled_pods /{print $2}'; }
say "deleting the client2 pod: the chain's DEL in reverse (meshnode-cni, then bridge), then its netns"
fact "before DEL: client2 has the agent's nft table, policy rule and 3 proxy listeners" before_del_ok
enrolled_before=$(enrolled)
t0=$(date +%s%N)
fact "CNI DEL of client2 succeeded" cni_chain "$work" 1 DEL "$(cni_pod_get "$work" client2 CONTAINERID)" \
  "/var/run/netns/$client2_ns" "$(cni_pod_get "$work" client2 CNI_ARGS)"
echo "  CNI DEL took $((($(date +%s%N) - t0) / 1000000)) ms"
fact "after DEL: nft table inet meshnode is gone from client2's netns" no_table
fact "after DEL: the policy-routing rule (fwmark 0x111 lookup 100) is gone" no_route_rule
fact "after DEL: no proxy listener (15001/15006/15008) left in client2's netns" \
  wait_until 5 "client2 listeners gone" no_listeners
fact "after DEL: client2's eth0 is gone (bridge DEL)" no_eth0
fact "agent metric meshnode_agent_enrolled_pods dropped from $enrolled_before to $((enrolled_before - 1))" \
  test "$(enrolled)" = $((enrolled_before - 1))
fact "the client pod still reaches the server after client2 left" \
  test "$(curl_from_client "http://$server_ip:$app_port/" "$work/resp-server2")" = 200
cni_pod_del "$work" client2 >/dev/null 2>&1 || true # netns (DEL again is a no-op: idempotent)

# ---------------------------------------------------------------------------------------- shutdown
say "stopping the proxies and agents (SIGTERM: exit 0)"
for n in 1 2; do
  for role in proxy agent; do
    if [[ $role == proxy ]]; then pid=${proxy_pids[$n]}; else pid=${agent_pids[$n]}; fi
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    fact "node$n $role exited 0 after SIGTERM (got $rc)" test "$rc" = 0
  done
done
proxy_pids=() agent_pids=()

t_end=$(date +%s.%N)
awk -v s="$t_start" -v b="$t_built" -v e="$t_end" \
  'BEGIN { printf "\ndemo wall time: %.1fs (%.1fs after the build)\n", e - s, e - b }'
if ((${#failures[@]})); then
  printf '\nDEMO FAILED: %d check(s) failed:\n' "${#failures[@]}" >&2
  printf '  - %s\n' "${failures[@]}" >&2
  exit 1
fi
demo_ok=1
echo "DEMO PASSED: pods created through the CNI chain (bridge + host-local + meshnode-cni), HTTP over HBONE" \
  "mutual TLS ($client_id -> $server_id) seen by the server from $client_ip, plain TCP to the legacy pod," \
  "port $admin_port refused by policy default/deny-admin-port, the late pod enrolled live by a kubectl label" \
  "(plain -> mutual TLS), and CNI DEL removed client2's rules and listeners."
