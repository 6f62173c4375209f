#!/usr/bin/env bash
# Run 5 (2026-12-06, session 52), same stage and machine as run 4 (still warm): the late-call test with 2 processes
# with conccl's kernels at the stream's own priority and at the greatest (CONCCL_HIGH_PRIORITY=0 / 1), to see whether
# the copy kernel's priority attribute made run 4's pool calls slower. The output was read from the device tool's
# reply (no files were kept); its lines are in ../run5/summary.txt.
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage; cd gpu-stage/bin
for hp in 0 1; do
  echo "CONCCL_HIGH_PRIORITY=$hp"
  LD_LIBRARY_PATH="$PWD/../lib" CONCCL_HIGH_PRIORITY=$hp CONCCL_TEST_WORKER_LIMIT_S=80 timeout 90 \
    ./test_gpu_multiprocess --gtest_filter="Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0" 2>&1 \
    | grep -a "rank 0: host time" -A10 | grep -a "AllReduce\|pool" | cut -c1-100
done
