#!/usr/bin/env bash
# run 6 (stage: the shared early-launch check, core/early_launch.h): the GPU tests of both cliques' early launches.
# test_gpu_thread_staged (LocalClique: staged thread-per-rank calls), test_gpu_multiprocess whole (ProcessClique:
# symmetric, staged, late, chunked, window, error, fault scenarios), test_gpu_call_order. Output: $OUT/*.log, summary.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
cd gpu-stage/bin || exit 1
step() {  # step NAME LIMIT_S CMD...
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc ($((SECONDS - t0)) s): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$name.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$s"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/$name.log" | head -10 | tee -a "$s"
}
step thread_staged 90 ./test_gpu_thread_staged --gtest_brief=1
step call_order 60 ./test_gpu_call_order --gtest_brief=1
step multiprocess 280 ./test_gpu_multiprocess --gtest_brief=1
