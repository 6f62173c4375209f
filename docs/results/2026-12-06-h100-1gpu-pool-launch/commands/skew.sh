#!/usr/bin/env bash
# Issue 24's host time per call with the peer 2 s late, through the drop-in, 2 processes, under PyTorch's default
#   allocator, expandable segments and cudaMallocAsync, plain NCCL (NCCL_HOSTID per process) beside each.
source "$(dirname "$0")/common.sh"
torch_suite skew 585 CASES=skew NPS=2 SKEW_ALLOCS="default expandable async" BUDGET_S=570
pack
true
