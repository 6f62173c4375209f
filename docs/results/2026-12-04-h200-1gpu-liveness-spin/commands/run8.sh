#!/usr/bin/env bash
# Run 8 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried (TARGETS="conccl_nccl_shim conccl"
# scripts/gpu-build.sh at the final commit): the PyTorch fault cases through the drop-in after the IPC-close change
# (every launch now passes HostGatedWork::enter/leave): kill -9 with the survivor waiting on the host and on the GPU,
# abort from another thread (c10d, pg, auto). Output under $OUT: faults.tgz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
echo "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)" | tee -a "$s"
t0=$SECONDS
CASES='^fault/(kill|abort)' NPS=2 NO_NCCL=1 BUDGET_S=120 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so /tmp/rf >/tmp/rf.txt 2>&1
echo "fault cases: rc=$? ($((SECONDS - t0)) s)" | tee -a "$s"
grep -a -E 'PASS|FAIL|RESULT' /tmp/rf.txt | cut -c1-300 | tee -a "$s"
cp /tmp/rf.txt /tmp/rf/ 2>/dev/null; tar czf "$OUT/faults.tgz" -C /tmp rf
