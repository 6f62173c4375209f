#!/usr/bin/env bash
# Run 2 (one H200, 2026-12-03), from the repository root with gpu-stage/ carried: a simulated node that dies again,
# after the fix of run 1's finding (the rail is aborted as soon as it reports the dead node, and the drop-in's abort
# ends the real NCCL's kernels before conccl's): tests/nccl/run_simulated_nodes.sh with the node-death cases only
# (2x2, 3x2; host and GPU waits). Output under $OUT: simulated-nodes.tgz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
echo "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)" | tee -a "$s"
t0=$SECONDS
SHIM="$PWD/gpu-stage/lib/libconccl_nccl.so" LAYOUTS="" WORKLOAD_LAYOUTS="" LIMIT=80 \
  bash tests/nccl/run_simulated_nodes.sh >/dev/null 2>&1
echo "simulated nodes (node death 2x2 3x2): rc=$? ($((SECONDS - t0)) s)" | tee -a "$s"
grep -E '^(PASS|FAIL)' "$OUT/simulated-nodes/summary.txt" | cut -c1-900 | tee -a "$s"
tar czf "$OUT/simulated-nodes.tgz" -C "$OUT" simulated-nodes && rm -rf "$OUT/simulated-nodes"
