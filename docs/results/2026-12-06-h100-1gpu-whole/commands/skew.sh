#!/usr/bin/env bash
# Issue 24's host time per call with the peer 2 s late, through the drop-in, 2 processes, under PyTorch's
#   cudaMallocAsync backend, its default allocator and expandable segments, plain NCCL (NCCL_HOSTID per process) beside
#   each. Argument 1: the limit in seconds (default 530; the runs' budget is 30 s less). A slow host takes ~33 s a run.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
lim="${1:-530}"
torch_suite skew "$lim" CASES=skew NPS=2 SKEW_ALLOCS="async default expandable" BUDGET_S=$((lim - 30))
pack
true
