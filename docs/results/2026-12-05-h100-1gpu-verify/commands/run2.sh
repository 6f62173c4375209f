#!/usr/bin/env bash
# Run 2 (one H100, 2026-12-05, session 46), the stage of run 1: registered buffers through the drop-in, plain NCCL as
# the reference. workloads.py's mem_pool case (a MemPool registered with register_mem_pool, symm off and on) on conccl
# and on plain NCCL (simulated hosts), 2 and 4 processes; the workloads with PyTorch's register hook (ALLOCS=hook,
# 2 processes); then `scripts/gpu.sh capture` with what is left.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}" PY=/opt/torch/.venv/bin/python CASES='workloads' \
  WORKLOAD_CASES=mem_pool ALLOCS="" BUDGET_S=130 timeout 150 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/mempool" >"$OUT/mempool.log" 2>&1
say "mem_pool, conccl and plain NCCL, 2 and 4 processes: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(PASS|FAIL|SKIP)|passed" "$OUT/mempool.log" | cut -c1-400 | tee -a "$s"
t0=$SECONDS
LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}" PY=/opt/torch/.venv/bin/python NO_NCCL=1 NPS=2 \
  CASES='workloads' ALLOCS=hook BUDGET_S=150 timeout 170 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/hook" >"$OUT/hook.log" 2>&1
say "workloads without and with the register hook, conccl, 2 processes: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(FAIL|SKIP)|hook\]|passed" "$OUT/hook.log" | cut -c1-300 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" mempool hook 2>/dev/null && rm -rf "$OUT/mempool" "$OUT/hook"
left=$((540 - SECONDS))
[ "$left" -gt 60 ] && OUT="$OUT/capture-run" BUDGET_S="$left" bash scripts/gpu.sh capture 2>&1 | tail -30 | tee -a "$s"
true
