#!/usr/bin/env bash
# Run 2 (one H200): the multi-process tests the fixes touch (memory CUDA IPC cannot share, host time with a late peer,
# Send/Recv, cross-communicator order, the unstaged path), calls captured on two streams, then the PyTorch tests through the drop-in, 2 processes.
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
  grep -E '^\[ +(OK|FAILED) |FAILED:|HUNG|fatal signal|AllReduce 1 MiB|every collective on memory' "$O/$name.log" \
    | grep -v '^\[  FAILED  \] .*, where' | sort -u | head -40 | cut -c1-330 | tee -a "$s"
}
step mp 230 "$B/test_gpu_multiprocess" \
  --gtest_filter='*MemoryCudaIpcCannotShare*:*DeferredCallsDoNotWaitForLatePeers*:*SendRecvAcrossProcesses*:*CallsOnTwoCommunicators*/0:*Unstaged/0'
step call-order 60 "$B/test_gpu_call_order"
NPS=2 BUDGET_S=280 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$O/torch2" >"$O/torch2.log" 2>&1
echo "torch NPS=2 rc=$?" | tee -a "$s"; grep -E '^(PASS|FAIL|SKIP)|passed' "$O/torch2.log" | cut -c1-250 | tee -a "$s"
cd "$O" && tar czf logs.tgz *.log torch2 && rm -rf *.log torch2
