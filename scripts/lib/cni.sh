# shellcheck shell=bash
# Pods created the way a container runtime creates them: a fresh netns, then the node's CNI chain
# (Debian containernetworking-plugins `bridge` + `host-local`, then `meshnode-cni`) executed with the
# node netns as the "host". Source this file after scripts/lib/cluster.sh; the cluster must have been
# built with 0 pods per node (no hand-made pod bridge), e.g. `cluster_up <prefix> 2 0 <workdir>`.
#
#   cni_node_setup <workdir> <node> <agent-socket> [excluded-namespaces-json]
#       writes <workdir>/cni/node<N>/meshnode.conflist: bridge `cni0` in the node netns,
#       isGateway (198.19.<N>.1 inside the NODE netns only), host-local 198.19.<N>.0/24 from .10 with
#       its dataDir under <workdir>, then meshnode-cni posting to <agent-socket>.
#   cni_node_primary <workdir> <node>
#       the same node with only the primary CNI (bridge + host-local) in <workdir>/cni/node<N>/net.d/
#       10-bridge.conflist and an empty bin dir <workdir>/cni/node<N>/bin: a node before
#       meshnode-agent's install step chains meshnode-cni into it (--cni-net-dir, --cni-bin-dir).
#       Pods then run whichever chain the conf dir holds (MN_CNI_CONFLIST=<file> overrides it, as a
#       runtime still holding an old chain would), with CNI_PATH "<bin dir>:/usr/lib/cni".
#   cni_pod_add <workdir> <node> <pod> [namespace] [uid]
#       creates netns <prefix>-n<N>-<pod>, runs the chain's ADD (CNI_ARGS with IgnoreUnknown=1,
#       K8S_POD_NAMESPACE/NAME/UID; uid defaults to cluster1//v1/Pod/<namespace>/<pod>) and prints the
#       pod's IPv4. The result goes to <workdir>/cni/pods/<pod>.json and the facts to
#       <workdir>/cni/pods/<pod>.env (NETNS, IP, NODE, NAMESPACE, UID, CONTAINERID). On failure the
#       chain's DEL runs and the netns is removed, as a runtime does; stdout then holds the CNI error.
#   cni_pod_del <workdir> <pod>
#       runs the chain's DEL (reverse order, cached prevResult) and removes the pod's netns.
#   cni_pod_get <workdir> <pod> <KEY>
#       prints one fact of a pod created by cni_pod_add.
#
# CNI_PATH is "<dir of meshnode-cni>:/usr/lib/cni" (the binary is $MESHNODE_CNI_BIN), or the node's
# own bin dir for a node set up with cni_node_primary.

MN_CNI_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MN_CNI_SYSTEM_PLUGINS=${MN_CNI_SYSTEM_PLUGINS:-/usr/lib/cni}

cni_log() { printf 'cni: %s\n' "$*" >&2; }

# cni_path: the CNI_PATH for the chain (meshnode-cni's dir first).
cni_path() {
  local bin=${MESHNODE_CNI_BIN:?MESHNODE_CNI_BIN must name the meshnode-cni binary}
  [[ -x $bin && $(basename "$bin") == meshnode-cni ]] || {
    cni_log "MESHNODE_CNI_BIN=$bin is not an executable named meshnode-cni"
    return 1
  }
  printf '%s:%s\n' "$(cd "$(dirname "$bin")" && pwd)" "$MN_CNI_SYSTEM_PLUGINS"
}

# cni_bridge_plugin <workdir> <node>: the node's primary CNI plugin (bridge + host-local) as JSON.
cni_bridge_plugin() {
  local dir="$1/cni/node$2" n=$2
  cat <<EOF
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/ipam",
        "ranges": [[{"subnet": "198.19.$n.0/24", "rangeStart": "198.19.$n.10", "rangeEnd": "198.19.$n.250",
                     "gateway": "198.19.$n.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
EOF
}

cni_node_setup() {
  local workdir=$1 n=$2 socket=$3 excluded=${4:-'["kube-system"]'}
  local dir="$workdir/cni/node$n"
  mkdir -p "$dir/ipam" "$dir/cache" "$workdir/cni/pods"
  cat >"$dir/meshnode.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "meshnode-node$n",
  "plugins": [
$(cni_bridge_plugin "$workdir" "$n"),
    {
      "type": "meshnode-cni",
      "agentSocket": "$socket",
      "excludeNamespaces": $excluded,
      "logLevel": "warn"
    }
  ]
}
EOF
}

cni_node_primary() {
  local workdir=$1 n=$2 dir="$1/cni/node$2"
  mkdir -p "$dir/ipam" "$dir/cache" "$dir/net.d" "$dir/bin" "$workdir/cni/pods"
  cat >"$dir/net.d/.10-bridge.conflist.tmp" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "meshnode-node$n",
  "plugins": [
$(cni_bridge_plugin "$workdir" "$n")
  ]
}
EOF
  mv "$dir/net.d/.10-bridge.conflist.tmp" "$dir/net.d/10-bridge.conflist"
}

# cni_node_conflist <workdir> <node>: the network a runtime on the node would use: $MN_CNI_CONFLIST
# when set (a runtime still holding an old chain), else the first config file of the node's conf dir
# (cni_node_primary), else the meshnode.conflist of cni_node_setup.
cni_node_conflist() {
  local dir="$1/cni/node$2" first
  if [[ -n ${MN_CNI_CONFLIST:-} ]]; then
    printf '%s\n' "$MN_CNI_CONFLIST"
  elif [[ -d $dir/net.d ]]; then
    first=$(find "$dir/net.d" -maxdepth 1 -type f \( -name '*.conf' -o -name '*.conflist' -o -name '*.json' \) \
      ! -name '.*' -printf '%f\n' | LC_ALL=C sort | head -n 1)
    printf '%s\n' "$dir/net.d/$first"
  else
    printf '%s\n' "$dir/meshnode.conflist"
  fi
}

# cni_node_path <workdir> <node>: CNI_PATH on the node: its own bin dir (where an installing agent
# copies meshnode-cni) when it has one, else cni_path.
cni_node_path() {
  local dir="$1/cni/node$2"
  if [[ -d $dir/bin ]]; then
    printf '%s:%s\n' "$dir/bin" "$MN_CNI_SYSTEM_PLUGINS"
  else
    cni_path
  fi
}

# cni_chain <workdir> <node> <command> <containerid> <netns path> <cni args>: runs the executor with
# the node netns as the host. Prints the chain's stdout; returns its status.
cni_chain() {
  local workdir=$1 n=$2 command=$3 cid=$4 netns=$5 args=$6 cpath prefix
  cpath=$(cni_node_path "$workdir" "$n") || return 1
  prefix=$(cluster_env_get "$workdir/cluster.env" MN_PREFIX)
  ip netns exec "$prefix-node$n" env CNI_COMMAND="$command" CNI_CONTAINERID="$cid" CNI_NETNS="$netns" \
    CNI_IFNAME=eth0 CNI_PATH="$cpath" CNI_ARGS="$args" \
    python3 "$MN_CNI_LIB_DIR/cni_exec.py" "$command" "$(cni_node_conflist "$workdir" "$n")" \
    "$workdir/cni/node$n/cache"
}

cni_pod_get() {
  sed -n "s/^$3=//p" "$1/cni/pods/$2.env"
}

cni_pod_add() {
  local workdir=$1 n=$2 pod=$3 ns=${4:-default}
  local uid=${5:-cluster1//v1/Pod/$ns/$pod} prefix netns cid out ip
  prefix=$(cluster_env_get "$workdir/cluster.env" MN_PREFIX)
  [[ -n $prefix ]] || { cni_log "no cluster in $workdir"; return 1; }
  netns="$prefix-n$n-$pod"
  cid="${prefix#mn-}-$pod"
  if ! out=$(ip netns add "$netns" 2>&1); then
    cni_log "cannot create netns $netns: $out"
    return 1
  fi
  ip -n "$netns" link set lo up
  local args="IgnoreUnknown=1;K8S_POD_NAMESPACE=$ns;K8S_POD_NAME=$pod;K8S_POD_UID=$uid"
  printf 'NETNS=%s\nNODE=%s\nNAMESPACE=%s\nUID=%s\nCONTAINERID=%s\nCNI_ARGS=%s\n' \
    "$netns" "$n" "$ns" "$uid" "$cid" "$args" >"$workdir/cni/pods/$pod.env"
  if ! out=$(cni_chain "$workdir" "$n" ADD "$cid" "/var/run/netns/$netns" "$args"); then
    cni_log "ADD of pod $ns/$pod on node$n failed: $out"
    printf '%s\n' "$out"
    cni_chain "$workdir" "$n" DEL "$cid" "/var/run/netns/$netns" "$args" >/dev/null 2>&1 || true
    ip netns del "$netns" 2>/dev/null || true
    rm -f "$workdir/cni/pods/$pod.env"
    return 1
  fi
  printf '%s\n' "$out" >"$workdir/cni/pods/$pod.json"
  # The first IPv4 of the result's "ips" (no second interpreter start: this runs per pod).
  ip=$(grep -oE '"address": ?"[0-9.]+/' <<<"$out" | head -n 1 | grep -oE '[0-9.]+/' | tr -d /) || true
  [[ -n $ip ]] || {
    cni_log "ADD result of $pod has no IPv4: $out"
    return 1
  }
  printf 'IP=%s\n' "$ip" >>"$workdir/cni/pods/$pod.env"
  printf '%s\n' "$ip"
}

cni_pod_del() {
  local workdir=$1 pod=$2 env="$1/cni/pods/$2.env" rc=0 out
  [[ -f $env ]] || { cni_log "no pod $pod in $workdir"; return 1; }
  local n netns cid args
  n=$(cni_pod_get "$workdir" "$pod" NODE) netns=$(cni_pod_get "$workdir" "$pod" NETNS)
  cid=$(cni_pod_get "$workdir" "$pod" CONTAINERID) args=$(cni_pod_get "$workdir" "$pod" CNI_ARGS)
  if ! out=$(cni_chain "$workdir" "$n" DEL "$cid" "/var/run/netns/$netns" "$args"); then
    cni_log "DEL of pod $pod failed: $out"
    rc=1
  fi
  cluster_delete_netns "$netns" || rc=1
  rm -f "$env" "$workdir/cni/pods/$pod.json"
  return $rc
}
