#!/usr/bin/env bash
# Run 2 (2026-12-06, session 52), stage named in summary.txt (each buffer placed by the plan; pool memory asked once a
# call): 1. MemoryCudaIpcCannotShareWorksAtEverySize with 2 and 4 processes (run 1's 4-process failure: touching pool
# allocations); 2. CallsDoNotWaitForLatePeers, 2 processes, with CONCCL_HOST_LAPS=1 (where a pool call's host time
# goes); 3. the drop-in's skew case under cudaMallocAsync (2 processes); 4. the drop-in's workloads under
# cudaMallocAsync (2 processes).
set -u
OUT="${OUT:-/tmp/out}"
LIMIT="${RUN_LIMIT_S:-420}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
left() { [ $SECONDS -lt "$LIMIT" ] || { say "stopped before: $1 (${SECONDS} s used)"; return 1; }; }
gt() {  # NAME LIMIT FILTER [ENV=VALUE...]
  local name=$1 lim=$2 filter=$3; shift 3
  ( cd gpu-stage/bin && env LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=$((lim - 10)) \
      "$@" timeout "$lim" ./test_gpu_multiprocess --gtest_filter="$filter" ) >"$OUT/$name.log" 2>&1
}
kinds=Ranks/MultiProcess.MemoryCudaIpcCannotShareWorksAtEverySize
late=Ranks/MultiProcess.CallsDoNotWaitForLatePeers
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
for np in 0 2; do
  t0=$SECONDS
  gt kinds$np 100 "$kinds/$np"
  say "1. memory kinds, $((np + 2)) processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "every collective on memory\|FAILED\|wrong\|rror" "$OUT/kinds$np.log" | head -4 | cut -c1-300 | tee -a "$s"
done
t0=$SECONDS
gt late0 100 "$late/0" CONCCL_HOST_LAPS=1
say "2. late calls, 2 processes, CONCCL_HOST_LAPS=1: rc=$? ($((SECONDS - t0)) s)"
grep -a "rank 0: host time" -A14 "$OUT/late0.log" | grep -a "pool\|bound" | head -8 | cut -c1-150 | tee -a "$s"
grep -a "rank 0 dev.*host laps of" "$OUT/late0.log" | grep -a "pool bounce" | head -6 | cut -c1-900 | tee -a "$s"
if left "3. skew"; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 SKEW_ALLOCS=async \
    BUDGET_S=100 timeout 110 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
  say "3. skew, drop-in, cudaMallocAsync (bound 20 us): rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
fi
if left "4. workloads"; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES='workloads.*@async$' NPS=2 ALLOCS=async BUDGET_S=150 timeout 160 \
    bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/async" >"$OUT/async.log" 2>&1
  say "4. drop-in workloads under cudaMallocAsync, 2 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "^FAIL\|^SKIP\|passed,\|workloads/graphs" "$OUT/async/summary.txt" 2>/dev/null | cut -c1-240 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" skew async 2>/dev/null && rm -rf "$OUT/skew" "$OUT/async"
true
