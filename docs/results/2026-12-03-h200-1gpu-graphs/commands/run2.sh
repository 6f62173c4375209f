#!/usr/bin/env bash
# Run 2 (one H200): after the fix (the shim's scratch pool queries and frees in relaxed capture mode; tests capture
# in global mode, as PyTorch does): the shim's GPU tests (PreMulSum against the real NCCL, in graphs), the graph
# tests, the multi-process cases with graphs, then PyTorch's graphs and compile cases with 2 and 4 processes, default
# allocator and expandable segments.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O="${OUT:-/tmp/out}"; mkdir -p "$O"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
export CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" CONCCL_TIMEOUT_MS=20000
PY=/opt/torch/.venv/bin/python
SHIM="$PWD/gpu-stage/lib/libconccl_nccl.so"
s="$O/summary.txt"; : >"$s"
gt() { # NAME LIMIT BINARY ARGS...
  local name="$1" limit="$2"; shift 2; local t0=$SECONDS
  timeout -k 5 "$limit" "$@" --gtest_brief=1 >"$O/$name.log" 2>&1
  echo "$name: rc=$? in $((SECONDS - t0)) s" | tee -a "$s"
  grep -aE '^\[  (PASSED|FAILED)|FAILED  \]|tests ran|Failure|error' "$O/$name.log" | sort -u | head -16 | cut -c1-240 | tee -a "$s"
}
runp() { # NAME NP LIMIT ENV... -- ARGS...
  local name="$1" np="$2" limit="$3"; shift 3
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  env "${envs[@]}" timeout -k 5 "$limit" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$np" "$@" \
    >"$O/$name.log" 2>&1
  echo "$name: rc=$? in $((SECONDS - t0)) s" | tee -a "$s"
  grep -aE 'CASE|Error|FAIL' "$O/$name.log" | grep -v ChildFailedError | sort -u | head -8 | cut -c1-300 | tee -a "$s"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$s"
CONCCL_NCCL_SHIM_PATH="$SHIM" gt shim-gpu 120 gpu-stage/bin/test_gpu_nccl_shim
gt graphs 120 gpu-stage/bin/test_gpu_graphs
gt mp-graphs 150 gpu-stage/bin/test_gpu_multiprocess \
  --gtest_filter='Ranks/MultiProcess.EveryCollectiveMatchesTheReference/*:Ranks/MultiProcess.SymmetricWindowCallsMatchTheReference/0'
for np in 2 4; do
  runp "torch-graphs-compile-np$np" "$np" 150 LD_PRELOAD="$SHIM" -- tests/torch/workloads.py \
    --cases graphs,compile --expect-path conccl
  runp "torch-graphs-compile-np$np-expandable" "$np" 150 LD_PRELOAD="$SHIM" PYTORCH_ALLOC_CONF=expandable_segments:True \
    -- tests/torch/workloads.py --cases graphs,compile --expect-path conccl --expect-expandable
done
cd "$O" && tar czf logs.tgz *.log 2>/dev/null && rm -f *.log
