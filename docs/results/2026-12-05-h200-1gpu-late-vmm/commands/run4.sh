#!/usr/bin/env bash
# Run 4 (one H200, 2026-12-05, session 42; run 3 was written but never run), stage TARGETS="conccl_mp_worker conccl
# conccl_nccl_shim" at the commit named in the summary's first line. Fits the ~560 s of device time left:
#   1. memory_return (PyTorch's memory back after conccl's calls) through the drop-in with the default allocator,
#      2 and 4 processes: run 2 failed it before the retired ids an entry carries went from 8 to 256;
#   2. in the time left, the NP=2 runs of tests/torch/run_all.sh other than workloads (ordering, pipelining,
#      stream_waits) and its fault cases, conccl only (never run with the pair-owned route).
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) $(git log --oneline -1 2>/dev/null | cut -c1-60)"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python CASES=workloads WORKLOAD_CASES=memory_return NPS="2 4" ALLOCS=" " NO_NCCL=1 \
  BUDGET_S=110 timeout 125 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/memret" \
  >"$OUT/memret.log" 2>&1
say "memory_return, default allocator, 2 and 4 processes: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(FAIL|PASS|SKIP)|passed" "$OUT/memret.log" | cut -c1-400 | tee -a "$s"
grep -rahoE "held_MiB_[a-z_]+\"?: ?[0-9.]+" "$OUT/memret" | sort -u | head -8 | cut -c1-300 | tee -a "$s"
left=$((300 - SECONDS))
if [ $left -gt 60 ]; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python CASES='ordering|pipeline|stream_waits|fault' NPS=2 ALLOCS=" " NO_NCCL=1 \
    BUDGET_S=$((left - 10)) timeout $left bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/np2" \
    >"$OUT/np2.log" 2>&1
  say "ordering, pipelining, stream_waits, faults, 2 processes, conccl: rc=$? ($((SECONDS - t0)) s)"
  grep -aE "^(FAIL|PASS|SKIP)|passed" "$OUT/np2.log" | cut -c1-300 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" memret np2 2>/dev/null && rm -rf "$OUT/memret" "$OUT/np2"
true
