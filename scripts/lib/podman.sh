# shellcheck shell=bash
# A real container runtime on the simulated cluster: podman 4.3 (CNI network backend, runc) whose
# network chains meshnode-cni after `bridge` + `host-local`. Source after scripts/lib/cluster.sh.
# Settings that work on this VM: ../shared/research/env-probe.md §6 (runc, not crun; explicit
# default_ulimits; every config and all state under a temp dir via CONTAINERS_CONF and
# CONTAINERS_STORAGE_CONF; a busybox-static rootfs with relative symlinks, `podman import`ed).
#
#   podman_setup <workdir> <node> <agent-socket>
#       podman's bridge `<prefix w/o dash>pb` lives in the HOST netns (podman always runs the chain
#       there) as a plain L2 switch: no address, isGateway false, so the host neither routes nor
#       forwards anything. Its gateway 198.19.9.1 is a veth port owned by node <node>'s netns, which
#       routes the containers' traffic (198.19.9.0/24) into the cluster; every other node routes
#       198.19.9.0/24 via that node. Image localhost/mn-busybox:latest is imported from
#       /bin/busybox (busybox-static). Network name: <prefix w/o dash>.
#   mn_podman <workdir> <podman args...>
#       runs podman with that configuration.
#   podman_teardown <workdir>
#       removes the containers, the storage, the bridge and the veth, and the temp dir.

podman_setup() {
  local workdir=$1 n=$2 socket=$3 prefix cpath d m nodes
  prefix=$(cluster_env_get "$workdir/cluster.env" MN_PREFIX)
  nodes=$(cluster_env_get "$workdir/cluster.env" MN_NODES)
  cpath=$(cni_path) || return 1
  local net=${prefix/-/} bridge=${prefix/-/}pb veth=${prefix/-/}pv
  d="$workdir/podman"
  mkdir -p "$d/net.d" "$d/tmp" "$d/ipam" "$d/rootfs/bin" "$d/rootfs/tmp"
  printf 'NET=%s\nBRIDGE=%s\nVETH=%s\nNODE=%s\n' "$net" "$bridge" "$veth" "$n" >"$d/podman.env"
  cat >"$d/containers.conf" <<EOF
[containers]
netns = "bridge"
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$d/events.log"
tmp_dir = "$d/tmp"
runtime = "runc"
[network]
network_backend = "cni"
cni_plugin_dirs = ["${cpath//:/\", \"}"]
network_config_dir = "$d/net.d"
default_network = "$net"
EOF
  cat >"$d/storage.conf" <<EOF
[storage]
driver = "vfs"
graphroot = "$d/root"
runroot = "$d/runroot"
EOF
  cat >"$d/net.d/$net.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$net",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$d/ipam",
        "ranges": [[{"subnet": "198.19.9.0/24", "rangeStart": "198.19.9.10", "rangeEnd": "198.19.9.250",
                     "gateway": "198.19.9.1"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "198.19.9.1"}]
      }
    },
    {
      "type": "meshnode-cni",
      "agentSocket": "$socket",
      "defaultPodNamespace": "default",
      "logLevel": "warn"
    }
  ]
}
EOF
  # The L2 bridge in the host netns and the node's gateway port on it.
  cluster_run "create podman bridge $bridge" ip link add "$bridge" type bridge || return 1
  cluster_run "raise $bridge" ip link set "$bridge" up || return 1
  cluster_run "veth $veth<->node$n" ip link add "$veth" type veth peer name pb0 netns "$prefix-node$n" || return 1
  cluster_run "attach $veth" ip link set "$veth" master "$bridge" up || return 1
  cluster_run "gateway 198.19.9.1 in node$n" ip -n "$prefix-node$n" addr add 198.19.9.1/24 dev pb0 || return 1
  cluster_run "pb0 up in node$n" ip -n "$prefix-node$n" link set pb0 up || return 1
  for ((m = 1; m <= nodes; m++)); do
    ((m == n)) && continue
    cluster_run "route 198.19.9.0/24 in node$m" \
      ip -n "$prefix-node$m" route add 198.19.9.0/24 via "198.18.0.$n" dev eth0 || return 1
  done
  # Image: busybox-static with RELATIVE applet links (absolute ones would point into the host).
  cp /bin/busybox "$d/rootfs/bin/busybox"
  local applet
  for applet in $(/bin/busybox --list); do
    [[ $applet == busybox ]] || ln -sf busybox "$d/rootfs/bin/$applet"
  done
  tar -C "$d/rootfs" -c . | mn_podman "$workdir" import - localhost/mn-busybox:latest >/dev/null || return 1
}

mn_podman() {
  local d="$1/podman"
  shift
  CONTAINERS_CONF="$d/containers.conf" CONTAINERS_STORAGE_CONF="$d/storage.conf" podman "$@"
}

podman_teardown() {
  local workdir=$1 d="$1/podman"
  [[ -f $d/podman.env ]] || { rm -rf "$d"; return 0; }
  local bridge veth
  bridge=$(sed -n 's/^BRIDGE=//p' "$d/podman.env") veth=$(sed -n 's/^VETH=//p' "$d/podman.env")
  mn_podman "$workdir" rm -af -t 0 >/dev/null 2>&1 || true
  mn_podman "$workdir" system reset -f >/dev/null 2>&1 || true
  ip link del "$veth" 2>/dev/null || true
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$d"
}
