#!/usr/bin/env bash
# Run 6 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried: run 5's drop-in burst again with
# CONCCL_DEBUG=TRACE (host laps and route decisions per call), to find why the first call of broadcast's first burst
# held rank 0's thread for 2 s (the peer's sleep). Output under $OUT: trace.log.gz (both ranks), summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
s="$OUT/summary.txt"
echo "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)" | tee -a "$s"
cd tests/torch
env -u PYTORCH_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF LD_PRELOAD="$OLDPWD/gpu-stage/lib/libconccl_nccl.so" \
  CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" LD_LIBRARY_PATH="$NCCL_LIB:$OLDPWD/gpu-stage/lib" \
  CONCCL_DEBUG=TRACE timeout 200 /opt/torch/.venv/bin/python -m torch.distributed.run --standalone \
  --nproc-per-node 2 skew_host_time.py --calls 2 --burst 8 --expect-path conccl >"$OUT/trace.log" 2>&1
echo "rc=$?" | tee -a "$s"
grep -a -E '^\|' "$OUT/trace.log" | tee -a "$s"
gzip -f "$OUT/trace.log"
