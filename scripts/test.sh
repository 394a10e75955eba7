#!/usr/bin/env bash
# Installs missing dependencies, then configures, builds and runs every test (unit + integration,
# through ctest) for each CMake preset: `release` and `dev` (Debug + ASan/UBSan) by default,
# MESHNODE_PRESETS="dev" (space-separated) to choose; then a short smoke run of every fuzz target
# (scripts/fuzz.sh --smoke). Each build after the first runs in the background, at nice 19, during
# the previous preset's tests. Exits non-zero on any failure.
# Needs root (the integration tests create network namespaces); re-runs itself through sudo if
# needed. With CI=true the integration tests fail instead of skipping.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/scripts/lib/common.sh"
source "$repo/scripts/lib/cluster.sh"
ensure_root "${BASH_SOURCE[0]}" "$@"
cd "$repo"

bash scripts/install-deps.sh
ccache_env
read -r -a presets <<<"${MESHNODE_PRESETS:-release dev}"
t0=$SECONDS
declare -a failed=()
logs=$(mktemp -d /tmp/meshnode-test.XXXXXX)
bg_pid=""
trap '[[ -z $bg_pid ]] || kill -- "-$bg_pid" 2>/dev/null; rm -rf "$logs"' EXIT

# Fuzz smoke (after the presets): every libFuzzer target (tests/fuzz) replays its committed corpus,
# findings included, then fuzzes for a few seconds; a crash or broken invariant fails the run. Needs
# clang 19 and its libFuzzer runtime (install-deps.sh installs both); skipped visibly when they are
# missing. MESHNODE_FUZZ_SMOKE_SECONDS per target (default 10; 0 skips).
fuzz_secs=${MESHNODE_FUZZ_SMOKE_SECONDS:-10}
clang_resources=$(clang++-19 -print-resource-dir 2>/dev/null || true)
fuzz=true
fuzz_note="fuzz smoke skipped"
if [[ $fuzz_secs == 0 ]]; then
  fuzz=false
  fuzz_note="fuzz smoke skipped (MESHNODE_FUZZ_SMOKE_SECONDS=0)"
elif [[ -z $clang_resources || ! -f $clang_resources/lib/linux/libclang_rt.fuzzer-x86_64.a ]]; then
  fuzz=false
  fuzz_note="fuzz smoke SKIPPED: clang++-19 with libFuzzer is not installed (scripts/install-deps.sh)"
fi

# Every build after the first runs in the background at the lowest CPU priority while the tests of
# the preset before it run: ctest mostly waits (timeouts, round trips between namespaces; a release
# run keeps the machine about a third busy), so the build takes the idle CPU and the tests still
# get a core whenever they want one. Its output is printed once it is done.
bg_what=""
start_build() {  # $1 = preset; sets bg_pid, bg_what
  bg_what=$1
  # A process group of its own, so that an interrupted run stops the whole build.
  setsid bash -c 'cmake --preset "$1" >/dev/null && nice -n 19 cmake --build --preset "$1" -j2' _ "$1" \
    >"$logs/build-$1.log" 2>&1 &
  bg_pid=$!
}
wait_build() {  # waits for the background build; prints its log; fails if it failed
  local rc=0
  [[ -n $bg_pid ]] || return 0
  wait "$bg_pid" || rc=$?
  echo "==> [$bg_what] build (ran in the background; done at $((SECONDS - t0))s)"
  cat "$logs/build-$bg_what.log"
  bg_pid=""
  return $rc
}
next_build() {  # $1 = index of the preset whose tests are about to run
  if ((($1 + 1) < ${#presets[@]})); then
    start_build "${presets[$1 + 1]}"
  elif $fuzz; then
    start_build fuzz
  fi
}

for i in "${!presets[@]}"; do
  preset=${presets[$i]}
  if ((i == 0)); then
    echo "==> [$preset] configure"
    cmake --preset "$preset" >/dev/null || { failed+=("$preset: configure"); next_build "$i"; continue; }
    echo "==> [$preset] build"
    cmake --build --preset "$preset" -j2 || { failed+=("$preset: build"); next_build "$i"; continue; }
  elif ! wait_build; then
    failed+=("$preset: build")
    next_build "$i"
    continue
  fi
  next_build "$i"
  echo "==> [$preset] test"
  before=$(ip netns list | awk '{print $1}' | sort)
  ctest --preset "$preset" -j2 --output-on-failure || failed+=("$preset: tests")
  if [[ ${CI:-} == true ]]; then
    # A test killed by its ctest timeout cannot run its destructors: remove the clusters it left.
    for prefix in $(comm -13 <(echo "$before") <(ip netns list | awk '{print $1}' | sort) |
                      grep -oE '^mn-[0-9a-f]{6}' | sort -u); do
      echo "test.sh: removing leftover cluster $prefix" >&2
      cluster_down "$prefix" || true
    done
  fi
  echo "==> [$preset] done at $((SECONDS - t0))s"
done
if $fuzz; then
  if wait_build; then
    echo "==> [fuzz] smoke, ${fuzz_secs}s per target"
    bash scripts/fuzz.sh --smoke --no-build "$fuzz_secs" || failed+=("fuzz: smoke")
    fuzz_note="fuzz smoke ${fuzz_secs}s per target"
    echo "==> [fuzz] done at $((SECONDS - t0))s"
  else
    echo "fuzz.sh: the fuzz preset did not build" >&2
    failed+=("fuzz: build")
  fi
else
  echo "==> [fuzz] $fuzz_note"
fi
ccache --show-stats 2>/dev/null | grep -iE 'hits|misses' | head -3 || true

if ((${#failed[@]})); then
  printf 'test.sh: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "test.sh: all presets passed (${presets[*]}; $fuzz_note) in $((SECONDS - t0))s"
