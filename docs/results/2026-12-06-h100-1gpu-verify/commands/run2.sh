#!/usr/bin/env bash
# Run 2 (2026-12-06, session 53), the stage of run 1: PyTorch's suite through the drop-in (tests/torch/run_all.sh:
#   workloads, ordering, pipelining x DDP, stream_waits, the skew case (default allocator), every fault case, 2 and
#   4 processes), then the workloads with expandable segments and under cudaMallocAsync; conccl only (run 3 runs
#   plain NCCL beside the skew case).
source "$(dirname "$0")/common.sh"
torch_suite torch 580 NO_NCCL=1 BUDGET_S=555 ALLOCS="expandable async"
grep -aE "^PASS" "$OUT/torch.log" | wc -l | sed 's/$/ PASS lines/' | tee -a "$s"
pack
true
