#!/usr/bin/env bash
# Run 1 (2026-12-06, session 52), stage named in summary.txt: calls on cudaMallocAsync pool memory through the bounce
# regions (exec/pool_bounce_plan.h, exec/cuda/pool_bounce.h). In order, each step while device time is left (steps
# stop starting after RUN_LIMIT_S, default 500 s):
#  1. MemoryCudaIpcCannotShareWorksAtEverySize, 2 processes: every collective on pool memory at 16 and 64 MiB, AllToAllv
#     and Send/Recv 12 MiB, and two pool AllReduces on two streams back to back (the regions' order), every result
#     checked against the reference;
#  2. CallsDoNotWaitForLatePeers, 2 processes: the late-call bound (20 us p50, rank 0, peers 2 s late), pool memory
#     now bounded at every size (AllReduce 1 MiB / 64 MiB / 1 GiB, AllGather / ReduceScatter 64 MiB);
#  3. the drop-in's skew case (2 processes, SKEW_ASSERT_US default 20) under PyTorch's cudaMallocAsync backend, the
#     default allocator and expandable segments;
#  4. steps 1 and 2 with 4 processes;
#  5. the drop-in's workloads under cudaMallocAsync (graphs, compile, memory_return, ...), 2 processes;
#  6. EveryCollectiveMatchesTheReference, 2 processes (regression).
set -u
OUT="${OUT:-/tmp/out}"
LIMIT="${RUN_LIMIT_S:-500}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
left() { [ $SECONDS -lt "$LIMIT" ] || { say "stopped before: $1 (${SECONDS} s used)"; return 1; }; }
gt() {  # NAME LIMIT FILTER
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=$(($2 - 10)) \
      timeout "$2" ./test_gpu_multiprocess --gtest_filter="$3" ) >"$OUT/$1.log" 2>&1
}
kinds=Ranks/MultiProcess.MemoryCudaIpcCannotShareWorksAtEverySize
late=Ranks/MultiProcess.CallsDoNotWaitForLatePeers
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
gt kinds2 100 "$kinds/0"
say "1. memory kinds, 2 processes: rc=$? ($((SECONDS - t0)) s)"
grep -a "every collective on memory\|FAILED\|wrong\|rror" "$OUT/kinds2.log" | head -6 | cut -c1-300 | tee -a "$s"
t0=$SECONDS
gt late2 100 "$late/0"
say "2. late calls, 2 processes, bound 20 us: rc=$? ($((SECONDS - t0)) s)"
grep -a "rank 0: host time" -A14 "$OUT/late2.log" | grep -a "AllReduce\|pool\|bound\|FAILED" | head -12 | cut -c1-150 \
  | tee -a "$s"
if left "3. skew"; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 SKEW_ALLOCS="async default expandable" \
    BUDGET_S=200 timeout 210 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
  say "3. skew, drop-in, cudaMallocAsync / default / expandable segments (bound 20 us): rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
  grep -a "^FAIL\|^PASS" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
fi
if left "4. four processes"; then
  t0=$SECONDS
  gt kinds4 120 "$kinds/2"
  say "4a. memory kinds, 4 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "every collective on memory\|FAILED\|wrong\|rror" "$OUT/kinds4.log" | head -6 | cut -c1-300 | tee -a "$s"
fi
if left "4b. late calls, 4 processes"; then
  t0=$SECONDS
  gt late4 120 "$late/2"
  say "4b. late calls, 4 processes, bound 20 us: rc=$? ($((SECONDS - t0)) s)"
  grep -a "rank 0: host time" -A14 "$OUT/late4.log" | grep -a "AllReduce\|pool\|bound\|FAILED" | head -12 \
    | cut -c1-150 | tee -a "$s"
fi
if left "5. workloads"; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES='workloads.*@async$' NPS=2 ALLOCS=async BUDGET_S=140 timeout 150 \
    bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/async" >"$OUT/async.log" 2>&1
  say "5. drop-in workloads under cudaMallocAsync, 2 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "^FAIL\|^SKIP\|passed,\|workloads/graphs" "$OUT/async/summary.txt" 2>/dev/null | cut -c1-240 | tee -a "$s"
fi
if left "6. every collective"; then
  t0=$SECONDS
  gt every 80 "Ranks/MultiProcess.EveryCollectiveMatchesTheReference/0"
  say "6. EveryCollectiveMatchesTheReference, 2 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "collective cases\|FAILED\|wrong" "$OUT/every.log" | head -4 | cut -c1-200 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" skew async 2>/dev/null && rm -rf "$OUT/skew" "$OUT/async"
true
