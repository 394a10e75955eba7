#!/usr/bin/env bash
# Builds the meshnode container image with podman (deploy/Containerfile) on base images made from
# Debian packages: mmdebstrap writes a root filesystem tarball, podman imports it, so no registry
# is needed. Prints how long each step took.
#
#   scripts/image.sh [--binaries DIR] [--tag IMAGE] [--save FILE]
#
#   --binaries DIR  put the binaries of a finished build into the image (DIR: a build dir such as
#                   build/release, or a dir holding the three files) instead of compiling them in
#                   the Containerfile's build stage. The tests use this, so the image carries the
#                   very binaries they tested.
#   --tag IMAGE     default localhost/meshnode:<project version>
#   --save FILE     also write the image as an OCI archive, to load it where no registry is
#                   (`ctr -n k8s.io images import FILE`, `kind load image-archive FILE`)
#
# Environment:
#   MESHNODE_IMAGE_CACHE    base tarballs (default ~/.cache/meshnode/image). A tarball's name holds
#                           the hash of its package list, rootfs hook, suite and mirrors: CI can keep
#                           this dir between runs, and a changed package list makes a new one.
#   MESHNODE_IMAGE_REFRESH=1  rebuild the base tarballs (e.g. to pick up security updates)
#   MESHNODE_DEBIAN_MIRROR, MESHNODE_DEBIAN_SECURITY_MIRROR   apt sources of the bases
#   JOBS                    parallel compile jobs of the build stage (default 2)
#   CCACHE_DIR              mounted into the build stage (default ~/.cache/ccache)
#   MESHNODE_IMAGE_TIMINGS  file to append "step seconds" lines to
#   CONTAINERS_CONF, CONTAINERS_STORAGE_CONF  podman's own; without CONTAINERS_CONF a config that
#                           works on this kind of machine (runc, cgroupfs without systemd, rlimits
#                           within the hard limit) is written to the cache dir and used.
set -euo pipefail
shopt -s inherit_errexit

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/scripts/lib/common.sh"

binaries="" tag="" save=""
while (($#)); do
  case $1 in
    --binaries) binaries=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --save) save=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
ensure_root "${BASH_SOURCE[0]}" ${binaries:+--binaries "$binaries"} ${tag:+--tag "$tag"} ${save:+--save "$save"}

version=$(sed -n 's/^project(meshnode VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
tag=${tag:-localhost/meshnode:$version}
suite=bookworm
mirror=${MESHNODE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${MESHNODE_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
sources=("deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security $suite-security main")
cache=${MESHNODE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshnode/image}
mkdir -p "$cache"

log() { printf 'image.sh: %s\n' "$*" >&2; }

# step <name> <cmd...>: runs a step and reports its wall time.
step() {
  local name=$1 t0 t1 secs
  shift
  t0=$(date +%s.%N)
  "$@"
  t1=$(date +%s.%N)
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  log "step $name: ${secs} s"
  if [[ -n ${MESHNODE_IMAGE_TIMINGS:-} ]]; then printf '%s %s\n' "$name" "$secs" >>"$MESHNODE_IMAGE_TIMINGS"; fi
}

# packages <kind>: the package list of deploy/image/<kind>-packages, comma separated.
packages() {
  sed 's/#.*//' "$repo/deploy/image/$1-packages" | xargs | tr ' ' ','
}

# base_key <kind>: names a base by everything that goes into it.
base_key() {
  {
    printf '%s\n' "$1" "$suite" "${sources[@]}" "format 1"
    cat "$repo/deploy/image/$1-packages"
    [[ $1 != runtime ]] || cat "$repo/deploy/image/finish-runtime-rootfs"
  } | sha256sum | cut -c1-16
}

# make_base_tarball <kind> <file>: mmdebstrap of the base's packages into a tarball.
make_base_tarball() {
  # mmdebstrap picks the output format from the name: keep the .tar ending.
  local kind=$1 out=$2 tmp="${2%.tar}.tmp-$$.tar"
  local -a args
  if [[ $kind == runtime ]]; then
    # Only the listed packages and their dependencies, unpacked (no shell, no dpkg, no apt).
    args=(--variant=extract --extract-hook="$repo/deploy/image/finish-runtime-rootfs")
  else
    args=(--variant=apt --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
          --dpkgopt='path-exclude=/usr/share/locale/*')
  fi
  if ! mmdebstrap --quiet "${args[@]}" --include="$(packages "$kind")" "$suite" "$tmp" "${sources[@]}"; then
    rm -f "$tmp"
    log "mmdebstrap of the $kind base failed (apt sources: ${sources[*]})"
    return 1
  fi
  mv "$tmp" "$out"
}

# base_image <kind>: prints the image ref of a base, making tarball and image when missing.
base_image() {
  local kind=$1 key tarball ref
  key=$(base_key "$kind")
  tarball="$cache/meshnode-base-$kind-$key.tar"
  ref="localhost/meshnode-base-$kind:$key"
  if [[ ${MESHNODE_IMAGE_REFRESH:-0} == 1 ]]; then
    rm -f "$tarball"
    podman rmi -f "$ref" >/dev/null 2>&1 || true
  fi
  if [[ -f $tarball ]]; then
    log "$kind base: cached $tarball"
  else
    step "mmdebstrap-$kind" make_base_tarball "$kind" "$tarball"
    # Bases of older package lists are dead weight now.
    find "$cache" -maxdepth 1 -name "meshnode-base-$kind-*.tar" ! -name "$(basename "$tarball")" -delete
    podman images --format '{{.Repository}}:{{.Tag}}' "localhost/meshnode-base-$kind" | grep -vxF "$ref" |
      xargs -r podman rmi -f >/dev/null 2>&1 || true
  fi
  if ! podman image exists "$ref"; then
    step "import-$kind" podman import --quiet "$tarball" "$ref" >/dev/null
  fi
  printf '%s\n' "$ref"
}

# podman_config: a containers.conf for machines where podman's defaults do not run containers
# (crun on hybrid cgroups, no systemd, RLIMIT_NOFILE not raisable; env-probe §6).
podman_config() {
  [[ -z ${CONTAINERS_CONF:-} ]] || return 0
  local conf="$cache/containers.conf" hard
  hard=$(ulimit -Hn)
  {
    echo "[containers]"
    if [[ $hard != unlimited ]] && ((hard < 1048576)); then
      echo "default_ulimits = [\"nofile=$hard:$hard\", \"nproc=4096:4096\"]"
    fi
    echo "[engine]"
    if [[ $(cat /proc/1/comm 2>/dev/null) != systemd ]]; then
      echo 'cgroup_manager = "cgroupfs"'
      echo 'events_logger = "file"'
    fi
    if command -v runc >/dev/null 2>&1; then echo 'runtime = "runc"'; fi
  } >"$conf"
  export CONTAINERS_CONF=$conf
}

# stage_binaries <dir> <context>: copies the three binaries of a build into <context>/bin.
stage_binaries() {
  local dir=$1 ctx=$2 name found
  mkdir -p "$ctx/bin"
  for name in meshnode-proxy meshnode-agent meshnode-cni; do
    found=""
    for candidate in "$dir/$name" "$dir/src/app/$name" "$dir/agent/$name" "$dir/cni/$name"; do
      if [[ -x $candidate && -f $candidate ]]; then found=$candidate; break; fi
    done
    [[ -n $found ]] || { log "no executable $name in $dir (nor in its src/app, agent, cni)"; return 1; }
    cp "$found" "$ctx/bin/$name"
  done
}

command -v podman >/dev/null || { log "podman is missing (scripts/install-deps.sh installs it)"; exit 1; }
command -v mmdebstrap >/dev/null || { log "mmdebstrap is missing (scripts/install-deps.sh installs it)"; exit 1; }
podman_config
t_all=$SECONDS

runtime_base=$(base_image runtime)
commit=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]]; then commit="$commit-dirty"; fi
build_args=(--pull=never -f "$repo/deploy/Containerfile" -t "$tag" --build-arg "RUNTIME_BASE=$runtime_base"
            --label "org.opencontainers.image.version=$version" --label "org.opencontainers.image.revision=$commit")

if [[ -n $binaries ]]; then
  ctx=$(mktemp -d)
  trap 'rm -rf "$ctx"' EXIT
  stage_binaries "$binaries" "$ctx"
  for name in meshnode-proxy meshnode-agent meshnode-cni; do
    build_args+=(--label "io.meshnode.sha256.$name=$(sha256sum "$ctx/bin/$name" | cut -d' ' -f1)")
  done
  step build-prebuilt podman build --quiet "${build_args[@]}" --target runtime-prebuilt "$ctx" >/dev/null
else
  build_base=$(base_image build)
  ccache_env
  step build-from-source podman build "${build_args[@]}" --build-arg "BUILD_BASE=$build_base" \
    --build-arg "JOBS=${JOBS:-2}" --volume "$CCACHE_DIR:/ccache" "$repo"
fi
size=$(podman image inspect --format '{{.Size}}' "$tag")
log "built $tag ($(awk -v s="$size" 'BEGIN { printf "%.1f MB", s / 1e6 }'), revision $commit) in $((SECONDS - t_all)) s"
if [[ -n $save ]]; then
  rm -f "$save"
  step save podman save --quiet --format oci-archive -o "$save" "$tag"
  log "saved $save"
fi
printf '%s\n' "$tag"
