#!/usr/bin/env bash
# One call for a short device budget (estimated ~300 s from the parts' earlier times): call-order.sh trace (the
#   call-order test and its repro, the skew case under CONCCL_DEBUG=TRACE), memory_return and mem_pool through the
#   drop-in with 2 processes under the three allocators, and the skew case beside plain NCCL under cudaMallocAsync.
#   `closer-check.sh min` (estimated ~130 s): the call-order test and memory_return only.
here="$(dirname "$0")"
source "$here/../../results/2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
min=0
[ "${1:-}" != min ] || min=1
mkdir -p "$OUT/call-order"
OUT="$OUT/call-order" bash "$here/../../results/2026-12-07-h100-1gpu-verify/commands/call-order.sh" \
  $([ "$min" = 1 ] || echo trace) >/dev/null
cat "$OUT/call-order/summary.txt" >>"$s"
if [ "$min" = 1 ]; then
  torch_suite memory 120 CASES=workloads NPS=2 NO_NCCL=1 ALLOCS="expandable async" BUDGET_S=110 \
    WORKLOAD_CASES=memory_return
else
  torch_suite memory 200 CASES=workloads NPS=2 NO_NCCL=1 ALLOCS="expandable async" BUDGET_S=190 \
    WORKLOAD_CASES=memory_return,mem_pool
  torch_suite skew-async 120 CASES=skew NPS=2 SKEW_ALLOCS=async BUDGET_S=110
fi
pack
true
