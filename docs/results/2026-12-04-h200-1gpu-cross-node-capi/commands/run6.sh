#!/usr/bin/env bash
# Run 6 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried: the C API's AllToAllv on a
# hierarchical communicator as one group of sends and receives, the pairs inside a host on conccl, the others on the
# flat NCCL (it was all flat NCCL): test_gpu_multiprocess CrossNode.* / CrossNodeFaults.* (4 AllToAllv with uneven
# counts per layout, checked).
# Output under $OUT: capi-cross-node.log.gz, summary.txt.
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
CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" timeout 200 gpu-stage/bin/test_gpu_multiprocess \
  --gtest_filter='Layouts/CrossNode.*:CrossNodeFaults.*' >"$OUT/capi-cross-node.log" 2>&1
say "C API across simulated hosts: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (     OK|FAILED ) \]|never ran|nothing was|not on the|not conccl|did not run on conccl|FAILED:' "$OUT/capi-cross-node.log" | head -30 | cut -c1-200 | tee -a "$s"
grep -a -E 'peers of this node' "$OUT/capi-cross-node.log" | sed 's/vm:[0-9]* //' | cut -c1-160 | sort | uniq -c | head -10 | tee -a "$s"
gzip -f "$OUT/capi-cross-node.log"
