#!/usr/bin/env bash
# Run 2 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried:
#   1. the CrossNode tests again, now also checking each rank's log for the path its calls took (every collective that
#      decomposes ran in phases; pipelined on 3x2; the flat NCCL for 2+1; conccl alone on one host) and printing it;
#   2. the GPU suites not run since the IPC-close change of 2026-12-04 and touched by this change (the API's dispatch):
#      test_gpu_collectives, test_gpu_call_resources, test_gpu_graph_cache, test_gpu_no_hang, test_gpu_nccl_shim,
#      test_gpu_ops_c_api, test_gpu_soak (each bounded; brief output).
# Output under $OUT: capi-cross-node.log.gz, suites.log.gz, summary.txt.
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
CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" timeout 150 gpu-stage/bin/test_gpu_multiprocess \
  --gtest_filter='Layouts/CrossNode.*:CrossNodeFaults.*' >"$OUT/capi-cross-node.log" 2>&1
say "C API across simulated hosts: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (     OK|FAILED ) \]|never ran|nothing was|not on the|not conccl' "$OUT/capi-cross-node.log" | head -30 | cut -c1-200 | tee -a "$s"
grep -a -E 'rank 0: .*(hierarchical|flat NCCL|one host|pipelined|reported after)' "$OUT/capi-cross-node.log" | sed 's/vm:[0-9]* //' | cut -c1-200 | sort | uniq | head -40 | tee -a "$s"
gzip -f "$OUT/capi-cross-node.log"
: >"$OUT/suites.log"
for t in test_gpu_collectives:120 test_gpu_call_resources:50 test_gpu_graph_cache:70 test_gpu_no_hang:50 \
         test_gpu_nccl_shim:50 test_gpu_ops_c_api:50 test_gpu_soak:50; do
  name=${t%%:*}; limit=${t##*:}
  t0=$SECONDS
  timeout "$limit" gpu-stage/bin/$name --gtest_brief=1 >>"$OUT/suites.log" 2>&1
  rc=$?
  say "$name: rc=$rc ($((SECONDS - t0)) s) $(grep -a -E '^\[  (PASSED|FAILED) ' "$OUT/suites.log" | tail -2 | tr '\n' ' ' | cut -c1-160)"
done
grep -a -E '^\[  FAILED  \]' "$OUT/suites.log" | head -20 | tee -a "$s"
gzip -f "$OUT/suites.log"
