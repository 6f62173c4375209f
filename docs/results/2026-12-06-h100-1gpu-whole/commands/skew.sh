#!/usr/bin/env bash
# Issue 24's host time per call with the peer 2 s late, through the drop-in, 2 processes, under PyTorch's
#   cudaMallocAsync backend, its default allocator and expandable segments, plain NCCL (NCCL_HOSTID per process) beside
#   each. Budget 500 s (a slow host takes ~33 s a run).
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
torch_suite skew 530 CASES=skew NPS=2 SKEW_ALLOCS="async default expandable" BUDGET_S=500
pack
true
