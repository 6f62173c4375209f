#!/usr/bin/env bash
# Session 5, call 3 (one H200): thread-per-rank staged calls, after eagerOnly on shared GPUs.
set -uo pipefail
source scripts/gpu-env.sh
export CUDA_DEVICE_MAX_CONNECTIONS=32
B=gpu-stage/bin
mkdir -p $OUT/r
timeout 300 $B/test_gpu_thread_staged > $OUT/r/thread-staged.log 2>&1; echo "thread-staged rc=$?"; grep -E "^\[  (PASSED|FAILED)|FAILED|returned after" $OUT/r/thread-staged.log | head
for v in "ts0 CONCCL_THREAD_STAGED=0" "ts0nocache CONCCL_THREAD_STAGED=0 CONCCL_GRAPH_CACHE=0" "ts2 CONCCL_THREAD_STAGED=2"; do
  set -- $v; name=$1; shift
  env "$@" timeout 150 $B/conccl-bench --backend conccl -t 2 -g 1 --devices 0,0 -b 8 -e 8M -f 4 \
    --coll all -n 30 -w 5 -c 1 --json $OUT/r/t2-$name.jsonl > $OUT/r/t2-$name.txt 2>&1; echo "bench $name rc=$?"
done
cd $OUT && tar czf r.tgz r && rm -rf r
