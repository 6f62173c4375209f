#!/usr/bin/env bash
# Run 1 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried (scripts/gpu-build.sh):
#   1. the C API across simulated hosts (issue 25 item 2): test_gpu_multiprocess CrossNode.* (2x2 interleaved, 2x3,
#      3x2 pipelined, an uneven 2+1 layout on the flat NCCL, one host through a rendezvous id; every collective,
#      AllToAllv, a Send/Recv ring, a CUDA graph) and CrossNodeFaults (a rank that ends, seen within 1 s);
#   2. the drop-in after its hierarchical engine moved into libconccl (nccl/hier_exec.h): run_simulated_nodes.sh,
#      collectives on 2x2 and 3x2 (split, new_group), the PyTorch workloads on 2x2, node death on 2x2.
# The real NCCL: torch's (2.28.9), by CONCCL_NCCL_REAL_LIB. Output under $OUT: capi-cross-node.log.gz,
# simulated-nodes.tgz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
t0=$SECONDS
CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" CONCCL_DEBUG=INFO timeout 250 gpu-stage/bin/test_gpu_multiprocess \
  --gtest_filter='Layouts/CrossNode.*:CrossNodeFaults.*' >"$OUT/capi-cross-node.log" 2>&1
say "C API across simulated hosts: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (     OK|FAILED ) \]|across hosts:|one host:|reported after|FAILED:' "$OUT/capi-cross-node.log" | head -40 | cut -c1-260 | tee -a "$s"
gzip -f "$OUT/capi-cross-node.log"
t0=$SECONDS
SHIM="$PWD/gpu-stage/lib/libconccl_nccl.so" LAYOUTS="2x2 3x2" WORKLOAD_LAYOUTS="2x2" DEATH_LAYOUTS="2x2" LIMIT=120 \
  timeout 320 bash tests/nccl/run_simulated_nodes.sh >/dev/null 2>&1
say "drop-in on simulated nodes: rc=$? ($((SECONDS - t0)) s)"
grep -E '^(PASS|FAIL)' "$OUT/simulated-nodes/summary.txt" | cut -c1-400 | tee -a "$s"
tar czf "$OUT/simulated-nodes.tgz" -C "$OUT" simulated-nodes && rm -rf "$OUT/simulated-nodes"
