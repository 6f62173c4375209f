#!/usr/bin/env bash
# Run 4 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried:
#   1. test_gpu_nccl_shim three times (run 2 stopped it at 50 s without a verdict, run 3 passed it in 14 s): a hang
#      or a slow first real-NCCL init?
#   2. the PyTorch suite through the drop-in after the IPC-close change (2026-12-04) and the move of the hierarchical
#      engine: tests/torch/run_all.sh, workloads and every fault case (kill host / gpu, abort host with each API / gpu,
#      the bootstrap intruder), 2 and 4 processes, and the workloads with expandable segments; no plain-NCCL reference.
# Output under $OUT: nccl-shim-repeat.log.gz, torch/ (run_all's outdir, logs packed), summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
for i in 1 2 3; do
  t0=$SECONDS
  timeout 60 gpu-stage/bin/test_gpu_nccl_shim >>"$OUT/nccl-shim-repeat.log" 2>&1
  say "test_gpu_nccl_shim #$i: rc=$? ($((SECONDS - t0)) s)"
done
grep -a -E '^\[       OK \].*\([0-9]{4,} ms\)|FAILED' "$OUT/nccl-shim-repeat.log" | cut -c1-160 | tee -a "$s"
gzip -f "$OUT/nccl-shim-repeat.log"
t0=$SECONDS
CASES='workloads|fault' NO_NCCL=1 ALLOCS=expandable BUDGET_S=400 \
  timeout 440 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/torch" >/dev/null 2>&1
say "PyTorch through the drop-in: rc=$? ($((SECONDS - t0)) s)"
cut -c1-220 "$OUT/torch/summary.txt" | tee -a "$s"
tar czf "$OUT/torch-logs.tgz" -C "$OUT/torch" logs fault 2>/dev/null && rm -rf "$OUT/torch/logs" "$OUT/torch/fault"
