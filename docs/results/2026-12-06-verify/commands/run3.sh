#!/usr/bin/env bash
# Run 3 (2026-12-06, session 53), the stage of run 1: issue 24's host time per call with the peer 2 s late through
#   the drop-in under the default allocator, expandable segments and cudaMallocAsync, plain NCCL (NCCL_HOSTID per
#   process) beside each; then CrossNode (test_gpu_multiprocess, simulated nodes) and the workloads with the older
#   PYTORCH_CUDA_ALLOC_CONF and CONCCL_VMM_EXPORT=0, while time is left.
source "$(dirname "$0")/common.sh"
torch_suite skew 400 CASES=skew NPS=2 SKEW_ALLOCS="default expandable async" BUDGET_S=380
[ $SECONDS -lt 440 ] && mp crossnode $((560 - SECONDS)) '*CrossNode*'
[ $SECONDS -lt 480 ] && torch_suite old $((580 - SECONDS)) NO_NCCL=1 NPS=2 CASES='workloads.*@expandable-old$' \
  ALLOCS=expandable-old BUDGET_S=$((560 - SECONDS))
pack
true
