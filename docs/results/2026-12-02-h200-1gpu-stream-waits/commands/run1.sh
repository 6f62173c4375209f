#!/usr/bin/env bash
# Run 1 (one H200): does a deferred call deadlock once other streams wait on the caller's stream? tests/torch/
# stream_waits.py through the drop-in, 2 processes, one case per run: deferred calls on (the default), on with
# CUDA_DEVICE_MAX_CONNECTIONS=32, off; plain NCCL as simulated hosts; then PyTorch's collectives case with a TRACE log.
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
  grep -E 'CASE|RESULT|watchdog|Error' "$O/$name.log" | grep -v ChildFailedError | head -8 | cut -c1-300 | tee -a "$s"
}
run2() { # NAME LIMIT ENV... -- ARGS...
  local name="$1" limit="$2"; shift 2
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  watched "$name" "$limit" "$PY" env "${envs[@]}" timeout -k 5 $((limit - 2)) "$PY" -m torch.distributed.run \
    --standalone --nproc-per-node 2 "$@"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$s"
for k in all_reduce_64m all_reduce_1m all_gather_64m broadcast_64m all_to_all_1m send_recv_16m; do
  run2 "sw-defer1-$k" 40 LD_PRELOAD="$SHIM:$BT" CONCCL_DEBUG=TRACE CONCCL_DEBUG_FILE="$O/trace-defer1-$k-%p.log" -- \
    tests/torch/stream_waits.py --cases "late_$k" --limit-s 10
done
run2 sw-defer1-conn32 60 LD_PRELOAD="$SHIM:$BT" CUDA_DEVICE_MAX_CONNECTIONS=32 -- tests/torch/stream_waits.py --limit-s 10
run2 sw-defer0 60 LD_PRELOAD="$SHIM:$BT" CONCCL_DEFER_CALLS=0 -- tests/torch/stream_waits.py --limit-s 10
run2 sw-nccl 60 LD_PRELOAD="$BT" -- tests/torch/stream_waits.py --sim-hosts --limit-s 10
run2 collectives-defer1 70 LD_PRELOAD="$SHIM:$BT" CONCCL_DEBUG=TRACE CONCCL_DEBUG_FILE="$O/trace-coll-%p.log" -- \
  tests/torch/workloads.py --cases collectives
cd "$O" && for f in trace-*.log; do [ -e "$f" ] && tail -n 60 "$f" > "$f.tail"; done
tar czf logs.tgz *.log *.tail 2>/dev/null && rm -f *.log *.tail
