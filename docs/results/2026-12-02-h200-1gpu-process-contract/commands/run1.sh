#!/usr/bin/env bash
# Run 1 (one H200): the multi-process suite whole, the drop-in's GPU test against the real NCCL, the cudaMallocAsync
# Gather failure again (workers print a backtrace on a fatal signal), host time under skew with the graph cache off.
# From the repository root on the GPU machine, gpu-stage/ carried (scripts/gpu-build.sh).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O="${OUT:-/tmp/out}"; mkdir -p "$O"
B=gpu-stage/bin
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
s="$O/summary.txt"; : >"$s"
step() {  # step NAME LIMIT CMD...
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$O/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$s"
  grep -E '^\[  (FAILED|PASSED) |^\[==========\]|FAILED:|HUNG|backtrace|conccl_mp_worker\(|p50|per call' "$O/$name.log" \
    | sort -u | head -40 | cut -c1-400 | tee -a "$s"
}
nvidia-smi -L | tee -a "$s"
step mp-all 270 "$B/test_gpu_multiprocess" --gtest_brief=1
step mp-memory-kinds-x2 100 "$B/test_gpu_multiprocess" --gtest_brief=1 --gtest_repeat=2 \
  --gtest_filter='*MemoryCudaIpcCannotShare*'
step mp-skew-nocache 60 env CONCCL_GRAPH_CACHE=0 "$B/test_gpu_multiprocess" --gtest_brief=1 \
  --gtest_filter='*DeferredCallsDoNotWaitForLatePeers*'
step shim 110 env CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" "$B/test_gpu_nccl_shim" --gtest_brief=1 \
  --gtest_filter='NcclShimGpu*'
cd "$O" && tar czf logs.tgz *.log && rm -f *.log
