#!/usr/bin/env bash
# Installs missing dependencies, then configures, builds and runs every test (unit + integration,
# through ctest) for each CMake preset: `release` and `dev` (Debug + ASan/UBSan) by default,
# MESHNODE_PRESETS="dev" (space-separated) to choose; then a short smoke run of every fuzz target
# (scripts/fuzz.sh --smoke). Exits non-zero on any failure.
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
presets=${MESHNODE_PRESETS:-release dev}
t0=$SECONDS
declare -a failed=()
for preset in $presets; do
  echo "==> [$preset] configure"
  cmake --preset "$preset" >/dev/null || { failed+=("$preset: configure"); continue; }
  echo "==> [$preset] build"
  cmake --build --preset "$preset" -j2 || { failed+=("$preset: build"); continue; }
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
# Fuzz smoke: every libFuzzer target (tests/fuzz) replays its committed corpus, findings included,
# then fuzzes for a few seconds; a crash or broken invariant fails the run. Needs clang 19 and its
# libFuzzer runtime (install-deps.sh installs both); skipped visibly when they are missing.
# MESHNODE_FUZZ_SMOKE_SECONDS per target (default 10; 0 skips).
fuzz_secs=${MESHNODE_FUZZ_SMOKE_SECONDS:-10}
clang_resources=$(clang++-19 -print-resource-dir 2>/dev/null || true)
fuzz_note="fuzz smoke skipped"
if [[ $fuzz_secs == 0 ]]; then
  echo "==> [fuzz] smoke skipped (MESHNODE_FUZZ_SMOKE_SECONDS=0)"
elif [[ -z $clang_resources || ! -f $clang_resources/lib/linux/libclang_rt.fuzzer-x86_64.a ]]; then
  echo "==> [fuzz] SKIPPED: clang++-19 with libFuzzer is not installed (scripts/install-deps.sh)"
else
  echo "==> [fuzz] build + smoke, ${fuzz_secs}s per target"
  bash scripts/fuzz.sh --smoke "$fuzz_secs" || failed+=("fuzz: smoke")
  fuzz_note="fuzz smoke ${fuzz_secs}s per target"
  echo "==> [fuzz] done at $((SECONDS - t0))s"
fi
ccache --show-stats 2>/dev/null | grep -iE 'hits|misses' | head -3 || true

if ((${#failed[@]})); then
  printf 'test.sh: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "test.sh: all presets passed ($presets; $fuzz_note) in $((SECONDS - t0))s"
