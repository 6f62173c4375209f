#!/usr/bin/env bash
# Session 5, call 7 (one H200): the graph cache tests with the lane-replay counter, twice.
set -uo pipefail
source scripts/gpu-env.sh
export CUDA_DEVICE_MAX_CONNECTIONS=32
mkdir -p $OUT/r
for i in 1 2; do
  timeout 110 gpu-stage/bin/test_gpu_graph_cache --gtest_brief=1 > $OUT/r/graph-cache-$i.log 2>&1; echo "graph-cache try $i rc=$?"
  grep -E "^\[  (PASSED|FAILED)|FAILED|Failure" $OUT/r/graph-cache-$i.log | head -6
done
cd $OUT && tar czf r.tgz r && rm -rf r
