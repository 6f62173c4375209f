#!/usr/bin/env bash
# Run 1 (2026-12-06, session 53), stage TARGETS="test_gpu_multiprocess conccl_mp_worker conccl conccl_nccl_shim":
#   test_gpu_multiprocess whole but CrossNode (run 3): 2-4 processes sharing the GPU; the C API's late-call bound
#   (20 us, cudaMalloc and cudaMallocAsync pool memory), every memory kind, the error cases (a pool buffer half its
#   call's size among them), kill / abort cases.
source "$(dirname "$0")/common.sh"
mp mp 570 '-*CrossNode*'
grep -a -A6 "rank 0: host time per call" "$OUT/mp.log" | grep -a "host time\|AllReduce\|AllGather\|ReduceScatter" |
  head -40 | cut -c1-200 | tee -a "$s"
pack
true
