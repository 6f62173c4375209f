#!/usr/bin/env bash
# Run 4 (one H200): why a rank killed while the survivor waits on the GPU for a 64 MiB call (staged late) is not
# reported within 1 s (run 3, fault/kill_host: 30 s): the kill case with CONCCL_DEBUG=INFO, native backtraces of the
# survivor's threads 8 s after the start (commands/dump_threads.py) and nvidia-smi's process list; then the same
# with CONCCL_STAGE_LATE_CALLS=0 (the survivor waits on the host).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O="${OUT:-/tmp/out}"; mkdir -p "$O"
here="$(dirname "$0")"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
export CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2"
PY=/opt/torch/.venv/bin/python
SHIM="$PWD/gpu-stage/lib/libconccl_nccl.so"; BT="$PWD/gpu-stage/lib/libbt_on_signal.so"
kill_case() { # NAME ENV...
  local name="$1"; shift; local d="$O/$name"; mkdir -p "$d"
  env LD_PRELOAD="$SHIM:$BT" CONCCL_DEBUG=INFO "$@" timeout -k 5 45 "$PY" -m torch.distributed.run --standalone \
    --nproc-per-node 2 tests/torch/fault_cases.py --expect-path conccl --mode kill --where host --result-dir "$d" \
    --timeout-s 30 --survive-s 12 > "$O/$name.log" 2>&1 &
  local pid=$!
  sleep 14
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> "$O/$name.log" 2>&1
  python3 "$here/dump_threads.py" fault_cases.py >> "$O/$name.log" 2>&1
  wait $pid; echo "$name: rc=$?"
  "$PY" tests/torch/fault_cases.py --verdict kill --result-dir "$d" --world 2 --where host --name kill_host 2>&1 | \
    grep -a '^CASE' | cut -c1-400
  grep -aE 'CONCCL WARN|exited' "$O/$name.log" | head -4 | cut -c1-250
}
kill_case kill-host-staged-late
kill_case kill-host-blocking CONCCL_STAGE_LATE_CALLS=0
cd "$O" && tar czf logs.tgz *.log */ 2>/dev/null && rm -rf *.log */
