#!/usr/bin/env bash
# Run 3 (2026-12-05, session 47): tests/torch/run_all.sh whole through the drop-in (2 and 4 processes, every script,
# the allocator variants; NO_NCCL=1: no plain NCCL references, for time), incl. mem_pool's expectation of run 1.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 BUDGET_S=450 timeout 480 bash tests/torch/run_all.sh \
  gpu-stage/lib/libconccl_nccl.so "$OUT/torch" >"$OUT/torch.log" 2>&1
say "tests/torch/run_all.sh whole, conccl: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(FAIL|SKIP)|passed" "$OUT/torch.log" | cut -c1-400 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" torch 2>/dev/null && rm -rf "$OUT/torch"
true
