#!/usr/bin/env bash
# The done marker written by the bounce copy-out node of a replayed graph (branch bounce-done-marker, stage in
#   gpu-stage-marker/) checked and timed against main (gpu-stage/, 2f20ae3: a stream write after the graph):
#   1. the marker stage: test_gpu_graph_cache whole; test_gpu_multiprocess memory kinds (pool calls on alternating
#      buffers, copies as graph nodes) and late calls (2-4 processes), every bound as the suite sets it;
#   2. A/B alternating, CallsDoNotWaitForLatePeers/0 (2 processes, peer 2 s late), bound relaxed to report only.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
say "marker: $(head -1 gpu-stage-marker/BUILD_INFO)"
t0=$SECONDS
( cd gpu-stage-marker/bin && timeout 120 ./test_gpu_graph_cache ) >"$OUT/graph-cache.log" 2>&1
say "marker test_gpu_graph_cache: rc=$? $(grep -a -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' "$OUT/graph-cache.log" | tr '\n' ' ')"
grep -a -E '^\[  FAILED  \] [A-Z]' "$OUT/graph-cache.log" | sort -u | head -10 | tee -a "$s"
CONCCL_TEST_WORKER_LIMIT_S=60 timeout 250 env \
  gpu-stage-marker/bin/test_gpu_multiprocess \
  --gtest_filter='*MemoryCudaIpcCannotShareWorksAtEverySize*:*CallsDoNotWaitForLatePeers/*' >"$OUT/mp-marker.log" 2>&1
say "marker test_gpu_multiprocess memory kinds + late calls: rc=$?"
grep -a -E '^\[  FAILED  \]|^\[  PASSED  \]' "$OUT/mp-marker.log" | sort -u | head -20 | cut -c1-200 | tee -a "$s"
grep -a "alternating buffers" "$OUT/mp-marker.log" | sed -E 's/.*(pool AllReduce 16 MiB on alternating[^;]*;).*/\1/' |
  sort | uniq -c | tee -a "$s"
late() {  # NAME BIN_DIR
  local name="$1" dir="$2" t1=$SECONDS
  ( cd "$dir" && LD_LIBRARY_PATH="$PWD/../lib:$LD_LIBRARY_PATH" CONCCL_TEST_MAX_HOST_US=1000 \
      CONCCL_TEST_WORKER_LIMIT_S=60 timeout 100 \
      ./test_gpu_multiprocess --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' ) >"$OUT/$name.log" 2>&1
  say "$name: rc=$? ($((SECONDS - t1)) s)"
  awk '/^rank 0: host time per call/{f=1;next} f&&/^  /{print;next} f{exit}' "$OUT/$name.log" |
    grep -aE "pool memory|AllReduce (1|64|1024) MiB:" | sed -E 's/, max[^(]*\(9 calls:/ (/; s/; graph.*//' |
    cut -c1-150 | tee -a "$s"
}
for i in 1 2 3 4; do
  [ $((SECONDS - t0)) -lt 480 ] || break
  late "base$i" gpu-stage/bin
  late "marker$i" gpu-stage-marker/bin
done
pack
true
