#!/usr/bin/env bash
# run 6 (stage: the shared early-launch check, core/early_launch.h): the GPU tests of both cliques' early launches.
# test_gpu_thread_staged (LocalClique: staged thread-per-rank calls), test_gpu_call_order, test_gpu_multiprocess
# (ProcessClique: symmetric, staged, late, chunked, window, error, fault scenarios; as far as 200 s reach), then
# tests/torch/skew_host_time.py through the drop-in with the drop-in's own time per call (concclNcclShimTakeCallNs).
# Output: $OUT/*.log, skew.jsonl, summary.txt.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
cd gpu-stage/bin || exit 1
step() {  # step NAME LIMIT_S CMD...
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc ($((SECONDS - t0)) s): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$name.log" | tr '\n' ' ' | cut -c1-300)" | tee -a "$s"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$OUT/$name.log" | head -10 | tee -a "$s"
}
step thread_staged 60 ./test_gpu_thread_staged --gtest_brief=1
step call_order 40 ./test_gpu_call_order --gtest_brief=1
step multiprocess 200 ./test_gpu_multiprocess --gtest_brief=1
cd ../.. || exit 1
t0=$SECONDS
PY=/opt/torch/.venv/bin/python
NL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
timeout -k 5 90 env LD_PRELOAD="$PWD/gpu-stage/lib/libconccl_nccl.so" CONCCL_NCCL_REAL_LIB="$NL/libnccl.so.2" \
  "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/skew_host_time.py --calls 4 --sleep-s 1 \
  --out "$OUT/skew.jsonl" --assert-max-us 20 >"$OUT/skew.log" 2>&1
echo "skew rc=$? ($((SECONDS - t0)) s)" | tee -a "$s"
grep -E '^\|' "$OUT/skew.log" | tee -a "$s"
grep -E '^(CASE|FAIL)' "$OUT/skew.log" | cut -c1-400 | tee -a "$s"
