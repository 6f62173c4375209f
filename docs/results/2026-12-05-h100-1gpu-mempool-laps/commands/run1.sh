#!/usr/bin/env bash
# Run 1 (2026-12-05, session 47): 2026-12-05-h100-1gpu-verify's prepared run 3 (after run 2's mem_pool failures:
# windows ended in a different order on each rank, test_gpu_multiprocess SymmetricWindowCallsMatchTheReference/0,
# 2 processes; workloads.py's mem_pool (register_mem_pool, symm off and on), 2 processes: conccl with the default
# allocator and with expandable segments staged (CONCCL_VMM_EXPORT=0), plain NCCL), then the late-call test with
# 3 processes (CallsDoNotWaitForLatePeers/1, peer 2 s late) with CONCCL_DEBUG=TRACE: the laps of each rank, by size.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" timeout 60 ./test_gpu_multiprocess \
    --gtest_filter='*SymmetricWindowCallsMatchTheReference/0' ) >"$OUT/symmetric.log" 2>&1
say "SymmetricWindowCallsMatchTheReference/0: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^\[  (PASSED|FAILED) |symmetric and alternating|windows ended|CHECK|wrong" "$OUT/symmetric.log" | head -8 | cut -c1-300 | tee -a "$s"
t0=$SECONDS
LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}" PY=/opt/torch/.venv/bin/python CASES='workloads' NPS=2 \
  WORKLOAD_CASES=mem_pool ALLOCS=expandable-old BUDGET_S=100 timeout 115 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/mempool" >"$OUT/mempool.log" 2>&1
say "mem_pool, 2 processes: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(PASS|FAIL|SKIP)|passed" "$OUT/mempool.log" | cut -c1-500 | tee -a "$s"
# 3 processes, peer late, laps (TRACE): the 20 us bound's gap (routed calls 15.7-32.7 us p50 on one H100, session 46)
t0=$SECONDS
( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_DEBUG=TRACE CONCCL_TEST_MAX_HOST_US=1e6 \
    CONCCL_TEST_WORKER_LIMIT_S=60 timeout 120 ./test_gpu_multiprocess --gtest_filter='*CallsDoNotWaitForLatePeers/1' ) \
  >"$OUT/late3-laps.log" 2>&1
say "late 3 processes with TRACE: rc=$? ($((SECONDS - t0)) s)"
grep -a -A7 "host time per call" "$OUT/late3-laps.log" | cut -c1-200 | tee -a "$s"
# The last laps line of each call kind, per rank
for r in 0 1 2; do
  grep -a "host laps of" "$OUT/late3-laps.log" | grep -a "rank $r " | awk '{k = $0; sub(/.*host laps of /, "", k);
    sub(/ #[0-9]+:.*/, "", k); last[k] = $0} END {for (k in last) print last[k]}' | sed 's/.*host laps of //' \
    | cut -c1-400 | sed "s/^/laps rank $r: /" | tee -a "$s"
done
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" mempool 2>/dev/null && rm -rf "$OUT/mempool"
true
