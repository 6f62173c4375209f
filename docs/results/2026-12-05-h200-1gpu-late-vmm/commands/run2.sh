#!/usr/bin/env bash
# Run 2 (one H200, 2026-12-05, session 41), the stage of run 1:
#   1. the tail of test_gpu_multiprocess that run 1's time limit cut (MultiProcessSymmetric.*, MultiProcessErrors.*,
#      InitRankInOneProcess.*);
#   2. PyTorch's workloads through the drop-in (every case of workloads.py, the new memory_return included), 2 and 4
#      processes, with the default allocator and with expandable segments exported to the peers
#      (ALLOCS=expandable-export: CONCCL_VMM_EXPORT=1), conccl only;
#   3. the drop-in's host time per call with the peer 2 s late (skew_host_time.py, 2 processes, one call per round
#      after a gloo barrier, 3 rounds), conccl only, in the time left.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
BT="$PWD/gpu-stage/lib/libbt_on_signal.so"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
t0=$SECONDS
CONCCL_TEST_WORKER_LIMIT_S=60 LD_PRELOAD="$BT" timeout 120 gpu-stage/bin/test_gpu_multiprocess --gtest_brief=1 \
  --gtest_filter='MultiProcessSymmetric.*:MultiProcessErrors.*:InitRankInOneProcess.*' >"$OUT/mp-tail.log" 2>&1
say "test_gpu_multiprocess tail: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' "$OUT/mp-tail.log" | head -10 | cut -c1-200 | tee -a "$s"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python CASES=workloads NPS="2 4" ALLOCS=expandable-export NO_NCCL=1 CONCCL_DEBUG=INFO \
  BUDGET_S=330 timeout 345 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/torch" \
  >"$OUT/torch.log" 2>&1
say "workloads, default and expandable-export, 2 and 4 processes: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(FAIL|PASS|SKIP)|passed" "$OUT/torch.log" | cut -c1-300 | tee -a "$s"
grep -rah "cannot be shared\|VMM" "$OUT/torch" 2>/dev/null | sed 's/^[^]]*\] //' | sort | uniq -c | head -8 |
  cut -c1-300 | tee -a "$s"
left=$((580 - SECONDS))
if [ $left -gt 70 ]; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python CASES=skew NPS=2 SKEW_CALLS=3 NO_NCCL=1 BUDGET_S=$((left - 10)) timeout $left \
    bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
  say "drop-in skew, conccl: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" | cut -c1-200 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" torch skew 2>/dev/null && rm -rf "$OUT/torch" "$OUT/skew"
true
