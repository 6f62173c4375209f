#!/usr/bin/env bash
# Run 3 (2026-12-06, session 53), the stage of run 1: the tests of test_gpu_multiprocess run 1 did not reach
#   (symmetric windows with 3 and 4 processes, chunked calls, CrossNode on simulated nodes), then issue 24's host
#   time per call with the peer 2 s late through the drop-in under the default allocator, expandable segments and
#   cudaMallocAsync, plain NCCL (NCCL_HOSTID per process) beside each, while time is left.
source "$(dirname "$0")/common.sh"
mp mp-rest 250 '*SymmetricWindowCallsMatchTheReference/1:*SymmetricWindowCallsMatchTheReference/2:*Chunked*:*CrossNode*'
torch_suite skew $((585 - SECONDS)) CASES=skew NPS=2 SKEW_ALLOCS="default expandable async" \
  BUDGET_S=$((570 - SECONDS))
pack
true
