#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz (the `fuzz` CMake preset), one at a time.
#
#   scripts/fuzz.sh [--smoke] [--no-build] SECONDS [TARGET...]
#   scripts/fuzz.sh --merge [--no-build] TARGET...
#
# TARGET is a name like `zds` or `zds_fuzz` (default: every target the preset built). Each target
# first runs every input of its committed seed corpus (tests/fuzz/corpus/<target>/, regression inputs
# included), then fuzzes for SECONDS.
#
# Long runs (default): under `nice -n 19` and idle I/O priority, so it can run in the background
# while others build and test. The grown corpus is kept outside the repo, in
# $MESHNODE_FUZZ_DIR/corpus/<target>/ (default /var/tmp/meshnode-fuzz), and reused by the next run;
# crashing inputs go to $MESHNODE_FUZZ_DIR/crashes/<target>/, logs to $MESHNODE_FUZZ_DIR/logs/.
# --smoke (scripts/test.sh): a throw-away corpus, nothing kept but the crash inputs, which are copied
# to build/fuzz/crashes/ for the CI log to name. --no-build: use the binaries already in build/fuzz.
# --merge: instead of fuzzing, adds to the committed corpus the fewest grown inputs that cover what
# it does not (libFuzzer -set_cover_merge); review and commit them.
#
# Prints one line per target (executions, libFuzzer's cov/ft, corpus size, crashes) and exits 1 if
# any target crashed or broke an invariant, 2 on usage or build errors.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/scripts/lib/common.sh"

smoke=false build=true merge=false
while [[ ${1:-} == --* ]]; do
  case $1 in
    --smoke) smoke=true ;;
    --merge) merge=true ;;
    --no-build) build=false ;;
    *) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
secs=0
if ! $merge; then
  secs=${1:-}
  [[ $secs =~ ^[0-9]+$ ]] || { sed -n '2,23p' "${BASH_SOURCE[0]}" >&2; exit 2; }
  shift
fi
bin_dir=$repo/build/fuzz/tests/fuzz

if $build; then
  ccache_env
  (cd "$repo" && cmake --preset fuzz >/dev/null && nice -n 10 cmake --build --preset fuzz -j2) ||
    { echo "fuzz.sh: the fuzz preset did not build" >&2; exit 2; }
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in "$bin_dir"/*_fuzz; do [[ -x $f ]] && targets+=("$(basename "$f")"); done
fi
((${#targets[@]})) || { echo "fuzz.sh: no fuzz targets in $bin_dir" >&2; exit 2; }

if $smoke; then
  work=$(mktemp -d /tmp/meshnode-fuzz-smoke.XXXXXX)
  trap 'rm -rf "$work"' EXIT
  run=()
else
  work=${MESHNODE_FUZZ_DIR:-/var/tmp/meshnode-fuzz}
  run=(nice -n 19 ionice -c 3)
fi

# Symbolized sanitizer reports (clang 19 ships no symbolizer of its own; any llvm-symbolizer reads it).
sym=$(command -v llvm-symbolizer-19 || command -v llvm-symbolizer || true)
[[ -n $sym ]] && export ASAN_SYMBOLIZER_PATH=$sym
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# stat <log> <regex>: the last number libFuzzer printed after the regex, or "?".
stat() { grep -oE "$2 *[0-9]+" "$1" | tail -1 | grep -oE '[0-9]+$' || echo "?"; }

failed=()
for t in "${targets[@]}"; do
  t=${t%_fuzz}
  exe=$bin_dir/${t}_fuzz
  [[ -x $exe ]] || { echo "fuzz.sh: no target $exe" >&2; exit 2; }
  seeds=$repo/tests/fuzz/corpus/$t
  corpus=$work/corpus/$t crashes=$work/crashes/$t log=$work/logs/$t.log
  mkdir -p "$corpus" "$crashes" "$(dirname "$log")"
  opts=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$crashes/")
  [[ -f $repo/tests/fuzz/$t.dict ]] && opts+=(-dict="$repo/tests/fuzz/$t.dict")
  # Per-target libFuzzer flags, one line (e.g. -max_len=10000 to reach a size limit).
  [[ -f $repo/tests/fuzz/$t.options ]] && read -ra extra <"$repo/tests/fuzz/$t.options" && opts+=("${extra[@]}")
  dirs=("$corpus")
  [[ -d $seeds ]] && dirs+=("$seeds")
  if $merge; then
    mkdir -p "$seeds"
    before=$(find "$seeds" -type f | wc -l)
    "${run[@]}" "$exe" -set_cover_merge=1 -timeout=10 -rss_limit_mb=2048 "$seeds" "$corpus" >"${log%.log}.merge.log" 2>&1 ||
      { echo "fuzz.sh: merge of $t failed, see ${log%.log}.merge.log" >&2; exit 1; }
    echo "merge $t: $before -> $(find "$seeds" -type f | wc -l) inputs in $seeds ($(du -sh "$seeds" | cut -f1))"
    continue
  fi
  t0=$SECONDS
  rc=0
  marker=$work/logs/.$t.start
  touch "$marker"
  "${run[@]}" "$exe" "${opts[@]}" "${dirs[@]}" >"$log" 2>&1 || rc=$?
  found=$(find "$crashes" -type f -newer "$marker" | sort)
  [[ $rc -ne 0 && -z $found ]] && found="(exit $rc, see $log)"
  printf 'fuzz %-12s %5ss  execs %-10s cov %-6s ft %-6s corpus %-5s crashes %s\n' "$t" \
    "$((SECONDS - t0))" "$(stat "$log" 'number_of_executed_units:')" "$(stat "$log" 'cov:')" \
    "$(stat "$log" 'ft:')" "$(find "$corpus" -type f | wc -l)" "$( [[ -n $found ]] && echo "$found" | wc -l || echo 0)"
  if [[ $rc -ne 0 ]]; then
    failed+=("$t")
    grep -E 'ERROR: |fuzz invariant broken|SUMMARY: ' "$log" | head -5 >&2 || true
    echo "fuzz.sh: $t failed; input(s): $found; log: $log" >&2
    if $smoke; then
      mkdir -p "$repo/build/fuzz/crashes/$t" && cp "$crashes"/* "$repo/build/fuzz/crashes/$t/" 2>/dev/null || true
      tail -40 "$log" >&2
    fi
  fi
done

if ((${#failed[@]})); then
  echo "fuzz.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
