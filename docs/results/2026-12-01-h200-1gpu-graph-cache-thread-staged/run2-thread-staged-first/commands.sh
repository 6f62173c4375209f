#!/usr/bin/env bash
# Session 5, call 2 (one H200): thread-per-rank staged calls, first version (graph cache used by early launches).
set -uo pipefail
source scripts/gpu-env.sh
export CUDA_DEVICE_MAX_CONNECTIONS=32
B=gpu-stage/bin
mkdir -p $OUT/r
timeout 300 $B/test_gpu_thread_staged > $OUT/r/thread-staged.log 2>&1; echo "thread-staged rc=$?"
for ts in 0 2; do
  CONCCL_THREAD_STAGED=$ts timeout 120 $B/conccl-bench --backend conccl -t 2 -g 1 --devices 0,0 -b 8 -e 8M -f 4 \
    --coll all -n 30 -w 5 -c 1 --json $OUT/r/t2-ts$ts.jsonl > $OUT/r/t2-ts$ts.txt 2>&1; echo "bench ts=$ts rc=$?"
done
cd $OUT && tar czf r.tgz r && rm -rf r
