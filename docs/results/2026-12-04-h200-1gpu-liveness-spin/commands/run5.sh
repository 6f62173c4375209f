#!/usr/bin/env bash
# Run 5 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried (scripts/gpu-build.sh): host time
# under skew through the drop-in with calls back to back (skew_host_time.py --burst 8: 8 calls per round while the
# peer, rank 1, sleeps 2 s; 2 rounds; PyTorch's run-ahead, the C API test's shape), conccl and plain NCCL (simulated
# hosts, peer 1 s late) in the same run. Output under $OUT: dropin-burst.tgz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
t0=$SECONDS
CASES=skew SKEW_CALLS=2 SKEW_BURST=8 BUDGET_S=400 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so /tmp/rb >/tmp/rb.txt 2>&1
say "drop-in skew, burst 8: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\||host time per call|PASS|FAIL' /tmp/rb.txt | head -40 | cut -c1-240 | tee -a "$s"
cp /tmp/rb.txt /tmp/rb/ 2>/dev/null; tar czf "$OUT/dropin-burst.tgz" -C /tmp rb
