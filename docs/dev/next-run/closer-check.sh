#!/usr/bin/env bash
# One call for a short device budget: the call-order test and its repro, the skew case under CONCCL_DEBUG=TRACE
#   (expandable segments, conccl only: the closer's waits and unmaps), memory_return and mem_pool through the drop-in
#   with 2 processes under the three allocators, and the skew case beside plain NCCL under cudaMallocAsync.
source "$(dirname "$0")/../../results/2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
t0=$SECONDS
timeout 150 gpu-stage/bin/test_gpu_call_order >"$OUT/call-order.log" 2>&1
say "test_gpu_call_order: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (PASSED|FAILED|SKIPPED) \]|^\[       OK \]' "$OUT/call-order.log" | cut -c1-200 | tee -a "$s"
t0=$SECONDS
timeout 150 gpu-stage/bin/test_gpu_call_order --gtest_also_run_disabled_tests \
  --gtest_filter='CallOrderRepro.DISABLED_CallsCaptured*' >"$OUT/call-order-repro.log" 2>&1
say "repro without the ordering (must fail): rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (PASSED|FAILED) \]|Failure|Expected|Which is' "$OUT/call-order-repro.log" | head -12 | cut -c1-200 |
  tee -a "$s"
torch_suite skew-trace 90 CASES=skew NPS=2 NO_NCCL=1 SKEW_ALLOCS=expandable BUDGET_S=80 CONCCL_DEBUG=TRACE
say "unmaps: $(grep -rah 'unmapped allocation' "$OUT/skew-trace" | wc -l)"
say "calls whose close wait was 10 us or more: $(grep -rahoE "wait for a close of a peer's mapping [0-9.]+" \
  "$OUT/skew-trace" | awk '$NF >= 10' | wc -l) of $(grep -rahc "wait for a close of a peer's mapping" \
  "$OUT/skew-trace" | awk '{n+=$1} END {print n+0}'); the longest (us):" \
  "$(grep -rahoE "wait for a close of a peer's mapping [0-9.]+" "$OUT/skew-trace" | awk '{print $NF}' | sort -rn |
    head -6 | tr '\n' ' ')"
torch_suite memory 200 CASES=workloads NPS=2 NO_NCCL=1 ALLOCS="expandable async" BUDGET_S=190 \
  WORKLOAD_CASES=memory_return,mem_pool
torch_suite skew-async 120 CASES=skew NPS=2 SKEW_ALLOCS=async BUDGET_S=110
pack
true
