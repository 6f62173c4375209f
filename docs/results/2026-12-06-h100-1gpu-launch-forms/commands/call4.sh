#!/usr/bin/env bash
# Call 4: the pool bounce copies as kernel nodes of the cached graph (stage e4775c8, gpu-stage/) checked and timed:
#   1. test_gpu_multiprocess: memory kinds (pool calls on alternating buffers with the copies as graph nodes included),
#      bad usage, late calls (2-4 processes) and deferred late calls (2 processes), every bound as the suite sets it;
#   2. A/B against the stage before (8ee4a71, gpu-stage-base/: the copy kernels launched around the graph),
#      alternating, CallsDoNotWaitForLatePeers/0 (2 processes, peers 2 s late) with the bound relaxed to report only,
#      as long as the call's time allows; then the new stage once with CONCCL_HOST_LAPS=1.
source "$(dirname "$0")/common.sh"
say "base: $(head -1 gpu-stage-base/BUILD_INFO)"
t0=$SECONDS
mp mp-new 330 '*MemoryCudaIpcCannotShareWorksAtEverySize*:*BadUsageIsReportedOnEveryRank*:*DeferredCallsDoNotWaitForLatePeers/0:*CallsDoNotWaitForLatePeers/*'
grep -a "alternating buffers" "$OUT/mp-new.log" | sed -E 's/.*(pool AllReduce 16 MiB on alternating[^;]*;).*/\1/' |
  sort | uniq -c | tee -a "$s"
late() {  # NAME BIN_DIR [VAR=value...]
  local name="$1" dir="$2" t1=$SECONDS
  shift 2
  ( cd "$dir" && env "$@" CONCCL_TEST_MAX_HOST_US=1000 CONCCL_TEST_WORKER_LIMIT_S=60 timeout 100 \
      ./test_gpu_multiprocess --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' ) >"$OUT/$name.log" 2>&1
  say "$name: rc=$? ($((SECONDS - t1)) s)"
  awk '/^rank 0: host time per call/{f=1;next} f&&/^  /{print;next} f{exit}' "$OUT/$name.log" |
    grep -aE "pool memory|AllReduce (1|64|1024) MiB:" | sed -E 's/, max[^(]*\(9 calls:/ (/; s/; graph.*//' |
    cut -c1-150 | tee -a "$s"
}
for i in 1 2 3; do
  [ $((SECONDS - t0)) -lt 390 ] || break
  late "base$i" gpu-stage-base/bin
  late "new$i" gpu-stage/bin
done
[ $((SECONDS - t0)) -lt 470 ] && late new-laps gpu-stage/bin CONCCL_HOST_LAPS=1 &&
  grep -a "host laps of" "$OUT/new-laps.log" | sed -E 's/.*host laps of //' | sort -u | cut -c1-400 | tee -a "$s"
pack
true
