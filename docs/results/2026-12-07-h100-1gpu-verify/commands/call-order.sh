#!/usr/bin/env bash
# Calls captured into one graph on two streams: the test must pass, the repro without the ordering must fail.
#   `call-order.sh K N` then runs test_gpu_multiprocess shard K of N in the same call; `call-order.sh trace` the skew
#   case under CONCCL_DEBUG=TRACE (expandable segments, then the default allocator, conccl only): where the closer's
#   unmaps fall against the calls (each "unmapped ... in N us (waited M ms ...)" line) and each call's laps.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
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
if [ "${1:-}" = trace ]; then
  torch_suite skew-trace 200 CASES=skew NPS=2 NO_NCCL=1 SKEW_ALLOCS="expandable default" BUDGET_S=170 \
    CONCCL_DEBUG=TRACE
  say "unmaps: $(grep -rah 'unmapped allocation' "$OUT/skew-trace" | wc -l)"
  grep -rah 'unmapped allocation' "$OUT/skew-trace" | sed 's/.*unmapped/unmapped/' | head -8 | cut -c1-200 |
    tee -a "$s"
  say "calls whose close wait was 10 us or more: $(grep -rahoE "wait for a close of a peer's mapping [0-9.]+" \
    "$OUT/skew-trace" | awk '$NF >= 10' | wc -l) of $(grep -rahc "wait for a close of a peer's mapping" \
    "$OUT/skew-trace" | awk '{n+=$1} END {print n+0}'); the longest (us):" \
    "$(grep -rahoE "wait for a close of a peer's mapping [0-9.]+" "$OUT/skew-trace" | awk '{print $NF}' | sort -rn |
      head -6 | tr '\n' ' ')"
elif [ $# -ge 2 ]; then
  GTEST_TOTAL_SHARDS="$2" GTEST_SHARD_INDEX="$(($1 - 1))" mp "mp-shard$1of$2" 420 '*'
fi
pack
true
