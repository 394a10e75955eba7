# shellcheck shell=bash
# scripts/demo.sh --control-plane: the two proxies run with no local config and no built-in CA,
# against meshnode-fake-istiod (tests/fakes: the fake xDS + Istio CA servers, real gRPC over TLS)
# on node 1's address. Sourced by demo.sh, which calls, in order:
#   cp_write_resources   the demo's workloads, service and policy as xDS resources ($work/resources.yaml)
#   cp_start             starts meshnode-fake-istiod in node 1's netns and waits until it listens
#   cp_proxy_env <node>  prints the proxy's environment (XDS_*, CA_*, NODE_NAME), one NAME=value a line
#   cp_checks            facts: both proxies connected to xDS with both types ACKed, every workload
#                        certificate issued by the fake CA (serials matched)
# Uses demo.sh's variables (work, node_ns, node_ip, client_ip, ..., app_port, admin_port) and fact().

cp_xds_port=15010 cp_ca_port=15012
cp_bin=${MESHNODE_FAKE_ISTIOD_BIN:-$repo/build/release/tests/fakes/meshnode-fake-istiod}

cp_workload() { # name sa ip protocol node [extra fields]
  # The uid the Kubernetes API gave the pod (demo.sh's pod_uid), as istiod would send it: the
  # proxy matches the xDS workload to the pod ZDS enrolled by that uid.
  printf -- '- workload: {uid: "%s", name: %s, namespace: default, serviceAccount: %s, addresses: ["%s"], tunnelProtocol: %s, node: %s, trustDomain: %s%s}\n' \
    "${pod_uid[$1]:-cluster1//v1/Pod/default/$1}" "$1" "$2" "$3" "$4" "$5" "$td" "${6:-}"
}

cp_write_resources() {
  {
    echo "resources:"
    cp_workload client client "$client_ip" HBONE node1
    cp_workload client2 client2 "$client2_ip" HBONE node1
    cp_workload server server "$server_ip" HBONE node2 \
      ", services: {\"default/server.default.svc.cluster.local\": {ports: [{servicePort: 80, targetPort: $app_port}]}}, authorizationPolicies: [default/deny-admin-port]"
    cp_workload legacy legacy "$legacy_ip" NONE node2
    echo "- service: {name: server, namespace: default, hostname: server.default.svc.cluster.local, addresses: [{network: \"\", address: \"198.19.200.10\"}], ports: [{servicePort: 80, targetPort: $app_port}]}"
    echo "- authorization: {name: deny-admin-port, namespace: default, scope: WORKLOAD_SELECTOR, action: DENY, rules: [{clauses: [{matches: [{destinationPorts: [$admin_port]}]}]}]}"
  } >"$work/resources.yaml"
}

cp_start() {
  [[ -x $cp_bin ]] || die "no executable meshnode-fake-istiod at $cp_bin"
  mkfifo "$work/istiod.in"
  # The fake reads commands from the FIFO; fd 7 keeps its write end open for the demo's lifetime.
  ip netns exec "${node_ns[1]}" "$cp_bin" --resources "$work/resources.yaml" --root-cert "$work/istiod-root.pem" \
    --listen "${node_ip[1]}" --xds-port "$cp_xds_port" --ca-port "$cp_ca_port" \
    <"$work/istiod.in" >"$work/istiod.out" 2>"$work/istiod.log" &
  server_pids+=($!)
  exec 7>"$work/istiod.in"
  wait_until 10 "meshnode-fake-istiod listening" grep -q '^ready ' "$work/istiod.out" || die "meshnode-fake-istiod did not start"
  echo "  meshnode-fake-istiod on node1: $(head -n 1 "$work/istiod.out"), $(grep -c -- '^- ' "$work/resources.yaml") resources"
}

cp_proxy_env() { # node
  local a=${node_ip[1]}
  printf '%s\n' "XDS_ADDRESS=https://$a:$cp_xds_port" "XDS_ROOT_CA=$work/istiod-root.pem" \
    "ALT_XDS_HOSTNAME=istiod.istio-system.svc" "CA_ADDRESS=https://$a:$cp_ca_port" \
    "CA_ROOT_CA=$work/istiod-root.pem" "ALT_CA_HOSTNAME=istiod.istio-system.svc" "NODE_NAME=node$1"
}

cp_dump() { ip netns exec "${node_ns[$1]}" curl -sS -m 2 "http://127.0.0.1:15000/config_dump"; }

# cp_acked <node>: connected, and the last response of both types was ACKed (no NACK).
cp_acked() {
  cp_dump "$1" | python3 -c '
import json, sys
x = json.load(sys.stdin)["xds"]
for t in x["types"]:
    print("    %s: %d resources, last ACK %s, last NACK error \"%s\"" % (t["typeUrl"].rsplit(".", 1)[-1],
          t["resources"], t["lastAckNonce"] or "-", t["lastNackError"]))
ok = x["connected"] and x["ready"] and all(t["lastAckNonce"] and not t["lastNackError"] for t in x["types"])
sys.exit(0 if ok else 1)'
}

# cp_certs_from_ca <node>: every certificate of the node is Available and its serial was issued by the fake CA.
cp_certs_from_ca() {
  local before
  before=$(grep -c '^ok calls' "$work/istiod.out" || true)
  printf 'calls\n' >&7
  wait_until 5 "fake CA call list" bash -c "(( \$(grep -c '^ok calls' '$work/istiod.out') > $before ))" || return 1
  cp_dump "$1" | CALLS="$(grep '^call ' "$work/istiod.out")" python3 -c '
import json, os, sys
certs = json.load(sys.stdin)["certificates"]
calls = os.environ["CALLS"]
ok = bool(certs)
for c in certs:
    serial = c["certChain"][0]["serialNumber"] if c["certChain"] else "-"
    issued = ("identity=%s serial=%s" % (c["identity"], serial)) in calls
    ok = ok and c["state"] == "Available" and issued
    print("    %s %s serial %s chain %d, valid %s .. %s, issued by the CA: %s" % (c["identity"], c["state"], serial,
          c["chainLength"], c["certChain"][0]["validFrom"] if c["certChain"] else "-",
          c["certChain"][0]["expirationTime"] if c["certChain"] else "-", "yes" if issued else "NO"))
sys.exit(0 if ok else 1)'
}

cp_checks() {
  local n
  for n in 1 2; do
    fact "node$n proxy: connected to meshnode-fake-istiod, Address and Authorization ACKed (/config_dump xds)" cp_acked "$n"
    fact "node$n proxy: every workload certificate issued by the Istio CA (serials match the CA's calls)" cp_certs_from_ca "$n"
  done
}
