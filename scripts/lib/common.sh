# shellcheck shell=bash
# Helpers shared by scripts/demo.sh and scripts/test.sh. Source this file.

# ensure_root <script> <args...>: returns if root; else re-runs the script through sudo (keeping the
# MESHNODE_*/CI/CCACHE_DIR variables) or exits explaining that root is needed.
ensure_root() {
  [[ $(id -u) -eq 0 ]] && return 0
  local script=$1
  shift
  if command -v sudo >/dev/null 2>&1; then
    echo "$(basename "$script"): needs root (network namespaces); re-running through sudo" >&2
    local -a keep=()
    local v
    for v in $(compgen -v | grep -E '^(MESHNODE_|CI$|CCACHE_DIR$)' || true); do
      keep+=("$v=${!v}")
    done
    exec sudo env "${keep[@]}" bash "$script" "$@"
  fi
  echo "$(basename "$script"): needs root (it creates network namespaces) and sudo is not available;" \
    "run it as root" >&2
  exit 1
}

# wait_until <seconds> <description> <cmd...>: polls cmd every 50 ms until it succeeds or the
# deadline passes (then prints what was awaited and returns 1).
wait_until() {
  local secs=$1 what=$2
  shift 2
  local deadline=$((SECONDS + secs))
  while true; do
    "$@" >/dev/null 2>&1 && return 0
    if ((SECONDS >= deadline)); then
      echo "timed out after ${secs}s waiting for: $what" >&2
      return 1
    fi
    sleep 0.05
  done
}

# ccache_env: a persistent compiler cache shared by every build on this machine.
ccache_env() {
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
  # Hash paths relative to the checkout, so a fresh clone elsewhere (CI) reuses earlier builds.
  CCACHE_BASEDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  export CCACHE_BASEDIR
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  mkdir -p "$CCACHE_DIR"
}

# build_proxy <repo>: configures (once) and builds build/release/src/app/meshnode-proxy.
build_proxy() {
  local repo=$1
  ccache_env
  if [[ ! -f $repo/build/release/build.ninja ]]; then
    (cd "$repo" && cmake --preset release >/dev/null)
  fi
  cmake --build "$repo/build/release" --target meshnode-proxy -j2
}

# build_release <repo> <target...>: configures (once) and builds targets of the release preset
# (build/release); e.g. build_release "$repo" meshnode-proxy meshnode-agent meshnode-cni.
build_release() {
  local repo=$1
  shift
  ccache_env
  if [[ ! -f $repo/build/release/build.ninja ]]; then
    (cd "$repo" && cmake --preset release >/dev/null)
  fi
  cmake --build "$repo/build/release" --target "$@" -j2
}
