#!/usr/bin/env bash
# Simulated cluster in network namespaces (see scripts/lib/cluster.sh for the topology). Needs root.
#
#   scripts/cluster.sh up [--prefix mn-xxxxxx] [--nodes N] [--pods P] [--workdir DIR]
#       creates the cluster; prints the path of its env file (KEY=value lines) on stdout
#   scripts/cluster.sh down (--prefix mn-xxxxxx | --workdir DIR)
#       removes everything of that cluster
#   scripts/cluster.sh cleanup
#       removes every leftover mn-* namespace (aborted runs)
#
# MESHNODE_NO_REDIRECT=1 skips the in-pod nftables redirection (plain routed topology).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/cluster.sh
source "$here/lib/cluster.sh"

usage() {
  sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
cmd=$1
shift
prefix="" nodes=2 pods=2 workdir=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --workdir) workdir=$2; shift 2 ;;
    *) usage ;;
  esac
done

if [[ $(id -u) -ne 0 ]]; then
  echo "cluster.sh: needs root (network namespaces); run it with sudo" >&2
  exit 1
fi

case $cmd in
  up)
    [[ -n $prefix ]] || prefix=$(cluster_new_prefix)
    [[ -n $workdir ]] || workdir="${TMPDIR:-/tmp}/meshnode-$prefix"
    cluster_up "$prefix" "$nodes" "$pods" "$workdir"
    echo "$workdir/cluster.env"
    ;;
  down)
    if [[ -z $prefix && -n $workdir ]]; then
      prefix=$(cluster_env_get "$workdir/cluster.env" MN_PREFIX)
    fi
    [[ -n $prefix ]] || usage
    cluster_down "$prefix"
    ;;
  cleanup)
    cluster_cleanup
    ;;
  *) usage ;;
esac
