#!/usr/bin/env bash
# tests/torch/run_all.sh through the drop-in (conccl only), 2 and 4 processes, PyTorch's default allocator, then
#   expandable segments and cudaMallocAsync: workloads, ordering, pipelining x DDP, stream waits, skew, every fault case.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
torch_suite torch 580 NO_NCCL=1 BUDGET_S=555 ALLOCS="expandable async"
grep -aE "^PASS" "$OUT/torch.log" | wc -l | sed 's/$/ PASS lines/' | tee -a "$s"
pack
true
