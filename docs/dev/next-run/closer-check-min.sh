#!/usr/bin/env bash
# The least of closer-check.sh (~150 s): the call-order test and its repro, memory_return with 2 processes under the
#   three allocators, then the skew case under CONCCL_DEBUG=TRACE with expandable segments (conccl only).
source "$(dirname "$0")/../../results/2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
t0=$SECONDS
timeout 100 gpu-stage/bin/test_gpu_call_order >"$OUT/call-order.log" 2>&1
say "test_gpu_call_order: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (PASSED|FAILED|SKIPPED) \]|^\[       OK \]' "$OUT/call-order.log" | cut -c1-200 | tee -a "$s"
timeout 60 gpu-stage/bin/test_gpu_call_order --gtest_also_run_disabled_tests \
  --gtest_filter='CallOrderRepro.DISABLED_CallsCaptured*' >"$OUT/call-order-repro.log" 2>&1
say "repro without the ordering (must fail): rc=$?"
grep -a -E '^\[  (PASSED|FAILED) \]|Failure' "$OUT/call-order-repro.log" | head -6 | cut -c1-200 | tee -a "$s"
torch_suite memory 120 CASES=workloads NPS=2 NO_NCCL=1 ALLOCS="expandable async" BUDGET_S=110 \
  WORKLOAD_CASES=memory_return
torch_suite skew-trace 60 CASES=skew NPS=2 NO_NCCL=1 SKEW_ALLOCS=expandable BUDGET_S=55 CONCCL_DEBUG=TRACE
say "unmaps: $(grep -rah 'unmapped allocation' "$OUT/skew-trace" | wc -l); calls whose close wait was 10 us or more:" \
  "$(grep -rahoE "wait for a close of a peer's mapping [0-9.]+" "$OUT/skew-trace" | awk '$NF >= 10' | wc -l) of" \
  "$(grep -rahc "wait for a close of a peer's mapping" "$OUT/skew-trace" | awk '{n+=$1} END {print n+0}')"
pack
true
