#!/usr/bin/env bash
# Run 2 (one H200, 2026-12-05, session 45), the stage of run 1: PyTorch's suite through the drop-in, whole
# (tests/torch/run_all.sh: workloads, ordering, pipelining, stream_waits, skew, every fault case, 2 and 4 processes,
# the allocator variants), conccl only (NO_NCCL=1: the plain NCCL references ran on 2026-12-02..04).
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 BUDGET_S=540 timeout 575 bash tests/torch/run_all.sh \
  gpu-stage/lib/libconccl_nccl.so "$OUT/torch" >"$OUT/torch.log" 2>&1
say "tests/torch/run_all.sh whole, conccl: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(FAIL|SKIP)|passed" "$OUT/torch.log" | cut -c1-300 | tee -a "$s"
grep -aE "^PASS" "$OUT/torch.log" | awk '{print $2, $3, $4, $5}' | sort | uniq -c | awk '{n+=$1} END {print n " PASS lines"}' |
  tee -a "$s"
grep -a -A12 "^host time per call" "$OUT/torch/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" torch 2>/dev/null && rm -rf "$OUT/torch"
true
