#!/usr/bin/env bash
# Run 4 (one H200, 2026-12-04, session 39), stage TARGETS="test_gpu_multiprocess conccl_mp_worker conccl
# conccl_nccl_shim" at 878ddc1: the pair-owned route for late data movement (AllToAllv with 3+ ranks fixed after run 3,
# own block on M) and for late reductions (the last rank reduces for all):
#   1. PairOwnedLateCallsMatchTheReference (2-4 processes, every collective, random arrival order every call);
#   2. host time with the peers 2 s late (CallsDoNotWaitForLatePeers/0, 2 processes), pair-owned on, then off;
#   3. the rest of test_gpu_multiprocess (all but CrossNode and the skew bounds);
#   4. the drop-in's host time under skew (tests/torch/run_all.sh CASES=skew, 2 processes), then the PyTorch
#      workloads with expandable segments, in the time left.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
BT="$PWD/gpu-stage/lib/libbt_on_signal.so"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
verdicts() { grep -a -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' "$1" | head -12 | cut -c1-200 | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
t0=$SECONDS
CONCCL_TEST_WORKER_LIMIT_S=60 LD_PRELOAD="$BT" timeout 170 gpu-stage/bin/test_gpu_multiprocess \
  --gtest_filter='*PairOwnedLateCalls*' >"$OUT/pair-owned.log" 2>&1
say "pair-owned scenario: rc=$? ($((SECONDS - t0)) s)"; verdicts "$OUT/pair-owned.log"
grep -a -E "FAILED|wrong|error|cases and a burst" "$OUT/pair-owned.log" | grep -av "^\[" | sort | uniq -c | head -12 | cut -c1-300 | tee -a "$s"
for po in 1 0; do
  t0=$SECONDS
  CONCCL_PAIR_OWNED_LATE_CALLS=$po CONCCL_TEST_WORKER_LIMIT_S=60 timeout 100 gpu-stage/bin/test_gpu_multiprocess \
    --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' >"$OUT/late-skew-po$po.log" 2>&1
  say "late skew, 2 processes, CONCCL_PAIR_OWNED_LATE_CALLS=$po: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A6 "rank 0: host time per call" "$OUT/late-skew-po$po.log" | head -7 | cut -c1-400 | tee -a "$s"
  grep -a -E "FAILED:|wrong" "$OUT/late-skew-po$po.log" | head -4 | cut -c1-300 | tee -a "$s"
done
left=$((420 - SECONDS))
t0=$SECONDS
CONCCL_TEST_WORKER_LIMIT_S=60 LD_PRELOAD="$BT" timeout $left gpu-stage/bin/test_gpu_multiprocess --gtest_brief=1 \
  --gtest_filter='-*CallsDoNotWaitForLatePeers*:*CrossNode*:*PairOwnedLateCalls*' >"$OUT/rest.log" 2>&1
say "rest of test_gpu_multiprocess: rc=$? ($((SECONDS - t0)) s, limit $left s)"; verdicts "$OUT/rest.log"
grep -a -E "FAILED:" "$OUT/rest.log" | sort | uniq -c | head -8 | cut -c1-300 | tee -a "$s"
left=$((570 - SECONDS))
if [ $left -gt 60 ]; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python CASES='skew|workloads' NPS=2 ALLOCS=expandable \
    WORKLOAD_CASES=collectives,p2p,moe,tp,graphs BUDGET_S=$((left - 15)) timeout $left \
    bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/torch" >"$OUT/torch.log" 2>&1
  say "PyTorch (skew, workloads): rc=$? ($((SECONDS - t0)) s)"
  grep -aE "^(FAIL|PASS|SKIP)|passed" "$OUT/torch.log" | head -30 | cut -c1-260 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" torch 2>/dev/null && rm -rf "$OUT/torch"
