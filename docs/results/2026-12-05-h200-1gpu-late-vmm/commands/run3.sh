#!/usr/bin/env bash
# Run 3 (one H200, 2026-12-05, session 41), stage TARGETS="test_gpu_multiprocess conccl_mp_worker conccl
# conccl_nccl_shim" at the commit that made the VMM export the default (after the retired ids an entry carries were
# raised from 8 to 256, for run 2's memory_return failures with the default allocator):
#   1. PyTorch's workloads through the drop-in, 2 and 4 processes, default allocator and expandable segments (now
#      exported by default), conccl;
#   2. the drop-in's skew case with TRACE (laps of one call per round), conccl only, in the time left.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) $(git log --oneline -1 2>/dev/null | cut -c1-60)"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python CASES=workloads NPS="2 4" ALLOCS=expandable NO_NCCL=1 CONCCL_DEBUG=INFO \
  BUDGET_S=220 timeout 235 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/torch" \
  >"$OUT/torch.log" 2>&1
say "workloads, default and expandable-export, 2 and 4 processes: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(FAIL|PASS|SKIP)|passed" "$OUT/torch.log" | grep -aE "FAIL|memory_return|setup|passed" | cut -c1-300 |
  tee -a "$s"
left=$((330 - SECONDS))
if [ $left -gt 80 ]; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python CASES=skew NPS=2 SKEW_CALLS=3 NO_NCCL=1 CONCCL_DEBUG=TRACE BUDGET_S=$((left - 10)) \
    timeout $left bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
  say "drop-in skew with TRACE, conccl: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" | cut -c1-200 | tee -a "$s"
  grep -rah "host laps of" "$OUT/skew" | grep -a "rank 0 " | sed 's/.*host laps of //' | cut -c1-330 | tail -30 |
    tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" torch skew 2>/dev/null && rm -rf "$OUT/torch" "$OUT/skew"
true
