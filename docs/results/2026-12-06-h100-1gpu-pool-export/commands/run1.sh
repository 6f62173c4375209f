#!/usr/bin/env bash
# Run 1 (2026-12-06, session 51), stage named in summary.txt: cudaMallocAsync memory shared with the peers
# (BufferExport::kPool, CONCCL_SHAREABLE_POOL=1; src/exec/cuda/pool_export.h), and what run 3 of
# ../../2026-12-06-h100-1gpu-pool was to run (graph memory). In order, each step while device time is left (the
# script stops starting steps after RUN_LIMIT_S, default 480 s):
#  1. the driver probe (probe_pool_ids.py: buffer ids and ranges of pool allocations, pointer imports, an import freed
#     while a newer one of the same address lives);
#  2. SharedPoolMemoryMovesDirectlyAndDoesNotWaitForLatePeers, 2 processes (every collective, AllToAllv, Send/Recv right
#     on such memory, peers' allocations imported, pool bursts with the peers 2 s late bounded at 20 us);
#  3. the drop-in's skew case under PyTorch's cudaMallocAsync backend with CONCCL_SHAREABLE_POOL=1 (2 processes, 20 us);
#  4. the drop-in's workloads under cudaMallocAsync (default pool: graphs, compile, memory_return, mem_pool after the
#     graph memory lookup through the driver), 2 processes;
#  5. EveryCollectiveMatchesTheReference (graph memory replays), 2 processes;
#  6. the shared-pool test with 4 processes.
set -u
OUT="${OUT:-/tmp/out}"
LIMIT="${RUN_LIMIT_S:-480}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
here="$(dirname "${BASH_SOURCE[0]}")"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
left() { [ $SECONDS -lt "$LIMIT" ] || { say "stopped before: $1 (${SECONDS} s used)"; return 1; }; }
gt() {  # NAME LIMIT FILTER
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=$(($2 - 10)) \
      timeout "$2" ./test_gpu_multiprocess --gtest_filter="$3" ) >"$OUT/$1.log" 2>&1
}
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
timeout 60 /opt/torch/.venv/bin/python "$here/probe_pool_ids.py" >"$OUT/probe.log" 2>&1
say "1. probe: rc=$? ($((SECONDS - t0)) s)"
cut -c1-400 "$OUT/probe.log" | tee -a "$s"
shared=Ranks/MultiProcess.SharedPoolMemoryMovesDirectlyAndDoesNotWaitForLatePeers
t0=$SECONDS
gt shared-pool2 110 "$shared/0"
say "2. shared pool, 2 processes: rc=$? ($((SECONDS - t0)) s)"
grep -a "pool memory\|imported by\|OK;\|FAILED\|wrong\|rror" "$OUT/shared-pool2.log" | head -14 | cut -c1-200 \
  | tee -a "$s"
if left "3. skew"; then
  t0=$SECONDS
  CONCCL_SHAREABLE_POOL=1 PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 SKEW_ALLOCS=async \
    BUDGET_S=100 timeout 110 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
  say "3. skew, drop-in, cudaMallocAsync with CONCCL_SHAREABLE_POOL=1 (bound 20 us): rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
  grep -a "^FAIL\|^PASS" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
fi
if left "4. workloads"; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES='workloads.*@async$' NPS=2 ALLOCS=async BUDGET_S=140 timeout 150 \
    bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/async" >"$OUT/async.log" 2>&1
  say "4. drop-in workloads under cudaMallocAsync (default pool), 2 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "^FAIL\|^SKIP\|passed,\|workloads/graphs" "$OUT/async/summary.txt" 2>/dev/null | cut -c1-240 | tee -a "$s"
fi
if left "5. graph memory"; then
  t0=$SECONDS
  gt every 80 "Ranks/MultiProcess.EveryCollectiveMatchesTheReference/0"
  say "5. EveryCollectiveMatchesTheReference, 2 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "graph memory\|collective cases\|FAILED\|wrong" "$OUT/every.log" | head -4 | cut -c1-200 | tee -a "$s"
fi
if left "6. shared pool, 4 processes"; then
  t0=$SECONDS
  gt shared-pool4 $((LIMIT + 90 - SECONDS)) "$shared/2"
  say "6. shared pool, 4 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "pool memory\|imported by\|FAILED\|wrong\|rror" "$OUT/shared-pool4.log" | head -8 | cut -c1-200 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" skew async 2>/dev/null && rm -rf "$OUT/skew" "$OUT/async"
true
