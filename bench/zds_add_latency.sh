#!/usr/bin/env bash
# ZDS AddWorkload → Ack latency of meshnode-proxy (issue 3 closing figure): a fake node agent
# enrolls N bare pod namespaces (lo + one veth each, uid not in any config) one at a time over ZDS
# and times each Add until its Ack. Prints median / p99 / max over N (default 100).
# Usage: sudo bench/zds_add_latency.sh   (ZDS_LATENCY_PODS=N; BUILD_DIR=<cmake build dir>,
#        default build/release). The measurement is the DISABLED_ gtest
#        ZdsMeasurement.DISABLED_AddWorkloadToAckLatency of integration_zds_test; it removes every
#        namespace it created.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/scripts/lib/common.sh"
ensure_root "${BASH_SOURCE[0]}" "$@"

build=${BUILD_DIR:-$repo/build/release}
if [[ ! -f $build/build.ninja && ! -f $build/Makefile ]]; then
  ccache_env
  (cd "$repo" && cmake --preset release >/dev/null)
fi
cmake --build "$build" --target meshnode-proxy integration_zds_test -j2 >/dev/null
export ZDS_LATENCY_PODS=${ZDS_LATENCY_PODS:-100}
"$build/tests/integration/integration_zds_test" --gtest_also_run_disabled_tests \
  --gtest_filter='ZdsMeasurement.DISABLED_AddWorkloadToAckLatency'
