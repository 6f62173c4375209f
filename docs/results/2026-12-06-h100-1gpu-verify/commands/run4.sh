#!/usr/bin/env bash
# Run 4 (2026-12-06, session 53), stage TARGETS="test_gpu_graph_cache test_gpu_call_resources test_gpu_no_hang
#   test_gpu_nccl_shim test_gpu_ops_c_api test_gpu_multiprocess conccl_mp_worker conccl conccl_nccl_shim": the GPU
#   suites not run since 2026-12-04 (docs/dev/next-steps.md, item 2), each bounded, shortest first. (test_gpu_ops_c_api
#   also needs the target conccl_ops: without it the binary did not load.)
source "$(dirname "$0")/common.sh"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$NCCL_LIB:$LD_LIBRARY_PATH"
for t in test_gpu_ops_c_api:30 test_gpu_no_hang:40 test_gpu_nccl_shim:50 test_gpu_call_resources:60 \
         test_gpu_graph_cache:80; do
  name=${t%%:*}; limit=${t##*:}
  t0=$SECONDS
  timeout "$limit" gpu-stage/bin/$name --gtest_brief=1 >"$OUT/$name.log" 2>&1
  rc=$?
  say "$name: rc=$rc ($((SECONDS - t0)) s) $(grep -a -E '^\[  (PASSED|FAILED) ' "$OUT/$name.log" | tail -2 |
    tr '\n' ' ' | cut -c1-160)"
  grep -a -E '^\[  FAILED  \]' "$OUT/$name.log" | head -8 | cut -c1-200 | tee -a "$s"
done
pack
true
