# shellcheck shell=bash
# Simulated cluster in network namespaces (DESIGN §6 test topology). Source this file.
#
#   fabric netns  <prefix>-fabric : bridge br0, one veth port n<N> per node
#   node netns    <prefix>-node<N>: eth0 198.18.0.<N>/24 on the fabric bridge, ip_forward=1,
#                                   bridge br0 198.19.<N>.1/24 for its pods,
#                                   routes 198.19.<M>.0/24 via 198.18.0.<M> for every other node M
#   pod netns     <prefix>-n<N>-p<I>: eth0 198.19.<N>.<10+I>/24 (I from 0), default via 198.19.<N>.1,
#                                   nft table `inet meshnode` redirecting TCP to the node proxy's
#                                   in-pod listeners (15001 outbound, 15006 inbound plaintext)
#
# Every interface is created directly inside its namespace, so names never clash across clusters
# and nothing is attached to the host's own namespace: no test packet can leave the machine.
# All names start with "mn-", so `cluster_cleanup` can remove leftovers of aborted runs by prefix.
#
# The topology is written to <workdir>/cluster.env as KEY=value lines (no quoting), e.g.
#   MN_PREFIX=mn-1a2b3c  MN_NODES=2  MN_PODS=2  MN_FABRIC_NETNS=mn-1a2b3c-fabric
#   MN_NODE1_NETNS=mn-1a2b3c-node1  MN_NODE1_IP=198.18.0.1  MN_NODE1_POD_CIDR=198.19.1.0/24
#   MN_POD_1_0_NETNS=mn-1a2b3c-n1-p0  MN_POD_1_0_IP=198.19.1.10
#
# Set MESHNODE_NO_REDIRECT=1 to build the topology without the nft redirection (plain routing).
# With 0 pods per node the nodes get no pod bridge either: pods are then created through the node's
# CNI chain (scripts/lib/cni.sh), whose bridge plugin makes the bridge and gateway 198.19.<N>.1.

MN_CLUSTER_NAME_RE='^mn-[0-9a-f]{6}$'

# cluster_new_prefix: prints a fresh random prefix mn-<6 hex>.
cluster_new_prefix() {
  printf 'mn-%s\n' "$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
}

cluster_log() { printf 'cluster: %s\n' "$*" >&2; }

# cluster_nft_ruleset: the in-pod redirection ruleset (multi-line: nft 1.0.6 rejects some one-liners).
cluster_nft_ruleset() {
  cat <<'EOF'
table inet meshnode {
  chain output {
    type nat hook output priority -100; policy accept;
    meta l4proto != tcp return
    meta mark & 0xfff == 0x539 return
    ip daddr 127.0.0.0/8 return
    ip6 daddr ::1 return
    meta l4proto tcp redirect to :15001
  }
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    meta l4proto != tcp return
    iifname "lo" return
    tcp dport 15008 return
    meta l4proto tcp redirect to :15006
  }
}
EOF
}

# cluster_run <what> <cmd...>: runs a command, and on failure names what failed with its output.
cluster_run() {
  local what=$1 out
  shift
  if ! out=$("$@" 2>&1); then
    cluster_log "FAILED to $what: $* :: $out"
    return 1
  fi
}

# cluster_up <prefix> <nodes> <pods-per-node> <workdir>: creates the cluster and writes the env file.
# On failure removes what it created and returns non-zero.
cluster_up() {
  local prefix=$1 nodes=${2:-2} pods=${3:-2} workdir=$4
  if ! [[ $prefix =~ $MN_CLUSTER_NAME_RE ]]; then
    cluster_log "prefix '$prefix' must look like mn-<6 hex digits>"
    return 2
  fi
  if ((nodes < 1 || nodes > 9 || pods < 0 || pods > 200)); then
    cluster_log "nodes must be 1..9 and pods 0..200 (got $nodes nodes, $pods pods)"
    return 2
  fi
  if ip netns list | grep -q "^$prefix-"; then
    cluster_log "namespaces with prefix $prefix already exist"
    return 2
  fi
  mkdir -p "$workdir"
  if ! cluster_build "$prefix" "$nodes" "$pods" "$workdir"; then
    cluster_down "$prefix"
    return 1
  fi
}

cluster_build() {
  local prefix=$1 nodes=$2 pods=$3 workdir=$4
  local fabric="$prefix-fabric" env="$workdir/cluster.env" n m i
  local -a lines=("MN_PREFIX=$prefix" "MN_NODES=$nodes" "MN_PODS=$pods" "MN_FABRIC_NETNS=$fabric"
                  "MN_WORKDIR=$workdir")

  cluster_run "create $fabric" ip netns add "$fabric" || return 1
  cluster_run "set up fabric" ip -n "$fabric" link set lo up || return 1
  cluster_run "create fabric bridge" ip -n "$fabric" link add br0 type bridge || return 1
  cluster_run "raise fabric bridge" ip -n "$fabric" link set br0 up || return 1

  for ((n = 1; n <= nodes; n++)); do
    local node="$prefix-node$n"
    cluster_run "create $node" ip netns add "$node" || return 1
    cluster_run "lo up in $node" ip -n "$node" link set lo up || return 1
    cluster_run "veth $node<->fabric" \
      ip -n "$node" link add eth0 type veth peer name "n$n" netns "$fabric" || return 1
    cluster_run "attach n$n" ip -n "$fabric" link set "n$n" master br0 up || return 1
    cluster_run "address $node" ip -n "$node" addr add "198.18.0.$n/24" dev eth0 || return 1
    cluster_run "eth0 up in $node" ip -n "$node" link set eth0 up || return 1
    if ((pods > 0)); then
      cluster_run "pod bridge in $node" ip -n "$node" link add br0 type bridge || return 1
      cluster_run "pod gateway in $node" ip -n "$node" addr add "198.19.$n.1/24" dev br0 || return 1
      cluster_run "pod bridge up in $node" ip -n "$node" link set br0 up || return 1
    fi
    cluster_run "ip_forward in $node" ip netns exec "$node" sysctl -qw net.ipv4.ip_forward=1 || return 1
    for ((m = 1; m <= nodes; m++)); do
      ((m == n)) && continue
      cluster_run "route to node $m pods in $node" \
        ip -n "$node" route add "198.19.$m.0/24" via "198.18.0.$m" dev eth0 || return 1
    done
    lines+=("MN_NODE${n}_NETNS=$node" "MN_NODE${n}_IP=198.18.0.$n" "MN_NODE${n}_POD_CIDR=198.19.$n.0/24")

    for ((i = 0; i < pods; i++)); do
      local pod="$prefix-n$n-p$i" ip="198.19.$n.$((10 + i))"
      cluster_run "create $pod" ip netns add "$pod" || return 1
      cluster_run "lo up in $pod" ip -n "$pod" link set lo up || return 1
      cluster_run "veth $pod<->$node" ip -n "$pod" link add eth0 type veth peer name "p$i" netns "$node" || return 1
      cluster_run "attach p$i in $node" ip -n "$node" link set "p$i" master br0 up || return 1
      cluster_run "address $pod" ip -n "$pod" addr add "$ip/24" dev eth0 || return 1
      cluster_run "eth0 up in $pod" ip -n "$pod" link set eth0 up || return 1
      cluster_run "default route in $pod" ip -n "$pod" route add default via "198.19.$n.1" dev eth0 || return 1
      if [[ ${MESHNODE_NO_REDIRECT:-0} != 1 ]]; then
        cluster_run "load nft redirection in $pod" \
          ip netns exec "$pod" nft -f <(cluster_nft_ruleset) || return 1
      fi
      lines+=("MN_POD_${n}_${i}_NETNS=$pod" "MN_POD_${n}_${i}_IP=$ip" "MN_POD_${n}_${i}_NODE=$n")
    done
  done
  lines+=("MN_REDIRECT=$([[ ${MESHNODE_NO_REDIRECT:-0} == 1 ]] && echo 0 || echo 1)")
  printf '%s\n' "${lines[@]}" >"$env.tmp" && mv "$env.tmp" "$env"
}

# cluster_netns_of <prefix>: lists the namespaces of one cluster.
cluster_netns_of() {
  ip netns list | awk '{print $1}' | grep -E "^$1-" || true
}

# cluster_delete_netns <name...>: stops processes still running inside (they keep a netns alive),
# then deletes the namespaces.
cluster_delete_netns() {
  local ns pid
  local -a pids=()
  for ns in "$@"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do pids+=("$pid"); done
  done
  if ((${#pids[@]})); then
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + 5))
    while ((SECONDS < deadline)); do
      local alive=0
      for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
      ((alive)) || break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  local rc=0
  for ns in "$@"; do
    ip netns del "$ns" 2>/dev/null || { ip netns list | grep -q "^$ns\b" && rc=1; }
  done
  return $rc
}

# cluster_down <prefix>: removes every namespace (and with them every link and nft table) of one
# cluster. Idempotent.
cluster_down() {
  local prefix=$1
  if ! [[ $prefix =~ $MN_CLUSTER_NAME_RE ]]; then
    cluster_log "refusing to remove '$prefix': not a mn-<6 hex> prefix"
    return 2
  fi
  local -a all
  mapfile -t all < <(cluster_netns_of "$prefix")
  ((${#all[@]})) || return 0
  cluster_delete_netns "${all[@]}"
}

# cluster_cleanup: removes every leftover mn-* namespace (of any cluster). Do not run while another
# cluster is in use on this machine.
cluster_cleanup() {
  local -a all
  mapfile -t all < <(ip netns list | awk '{print $1}' | grep -E '^mn-[0-9a-f]{6}-' || true)
  ((${#all[@]})) || return 0
  cluster_log "removing ${#all[@]} leftover namespaces: ${all[*]}"
  cluster_delete_netns "${all[@]}"
}

# cluster_env_get <envfile> <KEY>: prints the value of KEY from a cluster.env file.
cluster_env_get() {
  sed -n "s/^$2=//p" "$1"
}
