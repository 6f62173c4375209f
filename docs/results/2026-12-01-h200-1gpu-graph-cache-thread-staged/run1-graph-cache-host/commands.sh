#!/usr/bin/env bash
# Session 5, call 1 (one H200): host time per call with the graph cache off/on (-g 2 and -t 2, 2 ranks on GPU 0),
# then the multi-process suite on HEAD.
set -uo pipefail
source scripts/gpu-env.sh
export CUDA_DEVICE_MAX_CONNECTIONS=32
B=gpu-stage/bin
mkdir -p $OUT/r
for cache in 0 64; do
  CONCCL_GRAPH_CACHE=$cache timeout 150 $B/conccl-bench --backend conccl -g 2 --devices 0,0 -b 128K -e 256M -f 4 \
    --coll all -n 30 -w 5 -c 1 --json $OUT/r/g2-cache$cache.jsonl > $OUT/r/g2-cache$cache.txt 2>&1; echo "g2 cache$cache rc=$?"
done
CONCCL_GRAPH_CACHE=64 timeout 120 $B/conccl-bench --backend conccl -t 2 -g 1 --devices 0,0 -b 8 -e 64M -f 8 \
    --coll all -n 30 -w 5 -c 1 --json $OUT/r/t2-cache64.jsonl > $OUT/r/t2-cache64.txt 2>&1; echo "t2 rc=$?"
timeout 240 $B/test_gpu_multiprocess --gtest_brief=1 > $OUT/r/mp.log 2>&1; echo "mp rc=$?"; tail -3 $OUT/r/mp.log
cd $OUT && tar czf r.tgz r && rm -rf r
