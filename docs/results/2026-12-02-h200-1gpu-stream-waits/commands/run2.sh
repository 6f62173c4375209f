#!/usr/bin/env bash
# Run 2 (one H200): late calls staged at call time (CONCCL_STAGE_LATE_CALLS=1, CONCCL_DEFER_CALLS=0: the defaults;
# collectives, AllToAllv, and Send/Recv through the receiver's scratch).
# stream_waits.py (2 processes), the deferred form again with CUDA_MODULE_LOADING=EAGER (is lazy module loading what
# blocks the proxy?), PyTorch's collectives / p2p / groups / moe, ordering.py (p2p vs collectives), host time under skew (default spin and
# CONCCL_RENDEZVOUS_SPIN_US=5), the C++ multi-process tests of the call paths, stream_waits.py with 4 processes.
# Every step is bounded; steps are skipped once 540 s are spent.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O="${OUT:-/tmp/out}"; mkdir -p "$O"
here="$(dirname "$0")"
BT="$PWD/gpu-stage/lib/libbt_on_signal.so"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
export CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" CONCCL_TIMEOUT_MS=10000
PY=/opt/torch/.venv/bin/python
SHIM="$PWD/gpu-stage/lib/libconccl_nccl.so"
s="$O/summary.txt"; : >"$s"
watched() {
  local name="$1" limit="$2" pattern="$3"; shift 3
  if [ $((SECONDS + limit)) -gt 560 ]; then echo "$name: SKIPPED (time)" | tee -a "$s"; return; fi
  local t0=$SECONDS
  "$@" >"$O/$name.log" 2>&1 &
  local pid=$!
  while kill -0 $pid 2>/dev/null && [ $((SECONDS - t0)) -lt $((limit - 8)) ]; do sleep 1; done
  if kill -0 $pid 2>/dev/null; then
    python3 "$here/dump_threads.py" "$pattern" >>"$O/$name.log" 2>&1; sleep 2
    pkill -P $pid 2>/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null
    echo "$name: HUNG after $((SECONDS - t0)) s" | tee -a "$s"
  else
    wait $pid; echo "$name: rc=$? in $((SECONDS - t0)) s" | tee -a "$s"
  fi
  grep -E 'CASE|RESULT|watchdog|Error|FAILED|PASSED|p50|us/call|^ *[a-z_]+ .*[0-9]+ us' "$O/$name.log" | \
    grep -v ChildFailedError | head -24 | cut -c1-240 | tee -a "$s"
}
runp() { # NAME NP LIMIT ENV... -- ARGS...
  local name="$1" np="$2" limit="$3"; shift 3
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  watched "$name" "$limit" python env "${envs[@]}" timeout -k 5 $((limit - 2)) "$PY" -m torch.distributed.run \
    --standalone --nproc-per-node "$np" "$@"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$s"
runp sw-default 2 60 LD_PRELOAD="$SHIM:$BT" CONCCL_DEBUG=INFO CONCCL_DEBUG_FILE="$O/info-sw-%p.log" -- \
  tests/torch/stream_waits.py --limit-s 10
watched mp-late 200 conccl_mp_worker timeout -k 5 195 gpu-stage/bin/test_gpu_multiprocess --gtest_brief=1 \
  --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0:Ranks/MultiProcess.CallsOnTwoCommunicatorsInDifferentOrdersFinish/0:Ranks/MultiProcess.SendRecvAcrossProcesses/0:Ranks/MultiProcess.MemoryCudaIpcCannotShareWorksAtEverySize/0:Ranks/MultiProcess.EveryCollectiveMatchesTheReference/0:MultiProcessStaged.*'
for k in all_reduce_64m all_gather_64m; do
  runp "sw-defer-eager-$k" 2 35 LD_PRELOAD="$SHIM:$BT" CONCCL_DEFER_CALLS=1 CONCCL_STAGE_LATE_CALLS=0 \
    CUDA_MODULE_LOADING=EAGER -- tests/torch/stream_waits.py --cases "late_$k" --limit-s 8
done
runp workloads 2 150 LD_PRELOAD="$SHIM:$BT" -- tests/torch/workloads.py --cases collectives,p2p,groups,moe
runp ordering 2 90 LD_PRELOAD="$SHIM:$BT" CONCCL_TIMEOUT_MS=5000 -- tests/torch/ordering.py
runp skew-default 2 120 LD_PRELOAD="$SHIM:$BT" -- tests/torch/skew_host_time.py --out "$O/skew-conccl.jsonl"
runp skew-spin5 2 70 LD_PRELOAD="$SHIM:$BT" CONCCL_RENDEZVOUS_SPIN_US=5 -- tests/torch/skew_host_time.py \
  --ops all_reduce,all_gather,broadcast --out "$O/skew-conccl-spin5.jsonl"
runp sw-default-np4 4 70 LD_PRELOAD="$SHIM:$BT" -- tests/torch/stream_waits.py --limit-s 10
cd "$O" && tar czf logs.tgz *.log 2>/dev/null && rm -f *.log
