#!/usr/bin/env bash
# Run 4 (one H200): after the fix of IPC closes racing deferred gates (exec/cuda/host_gated_work.h): the unstaged
# multi-process test, then PyTorch's collectives through the drop-in with deferred calls on and off (native
# backtraces of every thread if a run is still going after its limit minus 10 s).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O="${OUT:-/tmp/out}"; mkdir -p "$O"
here="$(dirname "$0")"
B=gpu-stage/bin
BT="$PWD/gpu-stage/lib/libbt_on_signal.so"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
s="$O/summary.txt"; : >"$s"
# watched NAME LIMIT PATTERN CMD...: runs CMD in the background; dumps PATTERN's threads at LIMIT-10 s if still going.
watched() {
  local name="$1" limit="$2" pattern="$3"; shift 3
  local t0=$SECONDS
  "$@" >"$O/$name.log" 2>&1 &
  local pid=$!
  while kill -0 $pid 2>/dev/null && [ $((SECONDS - t0)) -lt $((limit - 10)) ]; do sleep 1; done
  if kill -0 $pid 2>/dev/null; then
    python3 "$here/dump_threads.py" "$pattern" >>"$O/$name.log" 2>&1; sleep 3
    for f in /tmp/conccl_mp_*.log; do [ -e "$f" ] && { echo "=== $f"; tail -c 40000 "$f"; }; done >>"$O/$name.log"
    pkill -P $pid 2>/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null
    echo "$name: HUNG after $((SECONDS - t0)) s" | tee -a "$s"
  else
    wait $pid; echo "$name: rc=$? in $((SECONDS - t0)) s" | tee -a "$s"
  fi
  grep -E '^\[ +(OK|FAILED) |CASE|Error|FAIL' "$O/$name.log" | grep -v ChildFailedError | head -8 | cut -c1-250 | tee -a "$s"
}
rm -f /tmp/conccl_mp_*.log
watched unstaged 100 conccl_mp_worker env LD_PRELOAD="$BT" "$B/test_gpu_multiprocess" --gtest_filter='*Unstaged/0'
export CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2"
for d in 1 0; do
  watched "torch-collectives-defer$d" 75 workloads.py env CONCCL_DEFER_CALLS=$d \
    LD_PRELOAD="$PWD/gpu-stage/lib/libconccl_nccl.so:$BT" timeout -k 5 80 /opt/torch/.venv/bin/python \
    -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/workloads.py --cases collectives,p2p,moe
done
cd "$O" && tar czf logs.tgz *.log && rm -f *.log
