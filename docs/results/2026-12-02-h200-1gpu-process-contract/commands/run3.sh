#!/usr/bin/env bash
# Run 3 (one H200): where the unstaged multi-process test and PyTorch's collectives through the drop-in hang (native
# backtraces of every thread, scripts/bt_on_signal.c, 40 s in), then the fixed tests: memory CUDA IPC cannot share,
# host time with a late peer, Send/Recv, cross-communicator order, calls captured on two streams.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O="${OUT:-/tmp/out}"; mkdir -p "$O"
here="$(dirname "$0")"
B=gpu-stage/bin
BT="$PWD/gpu-stage/lib/libbt_on_signal.so"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
s="$O/summary.txt"; : >"$s"
step() {  # step NAME LIMIT CMD...
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$O/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $((SECONDS - t0))s" | tee -a "$s"
  grep -E '^\[ +(OK|FAILED) |FAILED:|HUNG|fatal signal|AllReduce 1 MiB|AllReduce 64|AllReduce 1024|7 collectives|every collective on memory' \
    "$O/$name.log" | grep -v '^\[  FAILED  \] .*, where' | sort -u | head -40 | cut -c1-330 | tee -a "$s"
}
# 1. The unstaged hang: dump every worker thread after 40 s, keep the workers' logs.
rm -f /tmp/conccl_mp_*.log
LD_PRELOAD="$BT" CONCCL_DEBUG=INFO "$B/test_gpu_multiprocess" --gtest_filter='*Unstaged/0' >"$O/unstaged.log" 2>&1 &
gt=$!
for i in $(seq 40); do sleep 1; kill -0 $gt 2>/dev/null || break; done
if kill -0 $gt 2>/dev/null; then
  python3 "$here/dump_threads.py" conccl_mp_worker >>"$O/unstaged.log" 2>&1; sleep 2
  for f in /tmp/conccl_mp_*.log; do echo "=== $f"; tail -c 60000 "$f"; done >"$O/unstaged-workers.log"
  kill $gt; wait $gt 2>/dev/null; echo "unstaged: HUNG at 40 s (backtraces in unstaged-workers.log)" | tee -a "$s"
else
  wait $gt; echo "unstaged: finished rc=$?" | tee -a "$s"
fi
grep -E '^\[ +(OK|FAILED) ' "$O/unstaged.log" | head -3 | tee -a "$s"
# 2. PyTorch's collectives through the drop-in, 2 processes: dump after 40 s.
export CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2"
LD_PRELOAD="$PWD/gpu-stage/lib/libconccl_nccl.so:$BT" CONCCL_DEBUG=INFO timeout -k 5 70 /opt/torch/.venv/bin/python \
  -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/workloads.py --cases collectives \
  >"$O/torch-collectives.log" 2>&1 &
tp=$!
for i in $(seq 40); do sleep 1; kill -0 $tp 2>/dev/null || break; done
if kill -0 $tp 2>/dev/null; then
  python3 "$here/dump_threads.py" workloads.py >>"$O/torch-collectives.log" 2>&1; sleep 3
  echo "torch collectives: HUNG at 40 s" | tee -a "$s"
fi
wait $tp; echo "torch collectives rc=$?" | tee -a "$s"
grep -E 'PASS|FAIL|Error' "$O/torch-collectives.log" | head -5 | cut -c1-250 | tee -a "$s"
# 3. The fixed tests.
step call-order 40 "$B/test_gpu_call_order"
step mp 250 "$B/test_gpu_multiprocess" \
  --gtest_filter='*MemoryCudaIpcCannotShare*:*DeferredCallsDoNotWaitForLatePeers*:*SendRecvAcrossProcesses*/0:*CallsOnTwoCommunicators*/0:*StagedCallsDoNotWaitForPeers*/0'
cd "$O" && tar czf logs.tgz *.log && rm -f *.log
