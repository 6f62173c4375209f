#!/usr/bin/env bash
# Session 5, call 6 (one H200): the graph cache after "no lane graphs where ranks share a GPU", three times;
# the multi-process suite with room; thread-staged again; the soak.
set -uo pipefail
source scripts/gpu-env.sh
export CUDA_DEVICE_MAX_CONNECTIONS=32
B=gpu-stage/bin
mkdir -p $OUT/r
for i in 1 2 3; do
  timeout 90 $B/test_gpu_graph_cache --gtest_brief=1 --gtest_filter='GraphCache.ThreadPerRankOnOneGpu:*threadPerRank*' > $OUT/r/graph-cache-tpr-$i.log 2>&1
done
timeout 120 $B/test_gpu_graph_cache --gtest_brief=1 > $OUT/r/graph-cache.log 2>&1
timeout 240 $B/test_gpu_multiprocess --gtest_brief=1 > $OUT/r/mp.log 2>&1
timeout 60 $B/test_gpu_thread_staged --gtest_brief=1 > $OUT/r/thread-staged.log 2>&1
CONCCL_SOAK_CALLS=2000 timeout 60 $B/test_gpu_soak --gtest_brief=1 > $OUT/r/soak.log 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
