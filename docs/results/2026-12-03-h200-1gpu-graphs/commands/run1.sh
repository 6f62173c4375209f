#!/usr/bin/env bash
# Run 1 (one H200): why workloads.py --cases graphs fails under the defaults of 2026-12-02 (late calls staged):
# the graphs case with 2 processes, with CONCCL_DEBUG=TRACE (per-process logs), then with CONCCL_STAGE_LATE_CALLS=0
# and with a 200 ms rendezvous spin (late calls rarely staged), then compile.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O="${OUT:-/tmp/out}"; mkdir -p "$O"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
export CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" CONCCL_TIMEOUT_MS=10000
PY=/opt/torch/.venv/bin/python
SHIM="$PWD/gpu-stage/lib/libconccl_nccl.so"
s="$O/summary.txt"; : >"$s"
runp() { # NAME NP LIMIT ENV... -- ARGS...
  local name="$1" np="$2" limit="$3"; shift 3
  local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$SECONDS
  env "${envs[@]}" timeout -k 5 "$limit" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$np" "$@" \
    >"$O/$name.log" 2>&1
  echo "$name: rc=$? in $((SECONDS - t0)) s" | tee -a "$s"
  grep -aE 'CASE|Error|error|FAIL' "$O/$name.log" | grep -v ChildFailedError | sort -u | head -12 | cut -c1-300 | tee -a "$s"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$s"
runp graphs-trace 2 90 LD_PRELOAD="$SHIM" CONCCL_DEBUG=TRACE CONCCL_DEBUG_FILE="$O/trace-graphs-%p.log" -- \
  tests/torch/workloads.py --cases graphs --expect-path conccl
for f in "$O"/trace-graphs-*.log; do echo "== $f: $(wc -l <"$f") lines"; grep -iE 'captur|staged|error|WARN' "$f" | head -20 | cut -c1-260; done | tee -a "$s"
runp graphs-nolate 2 90 LD_PRELOAD="$SHIM" CONCCL_STAGE_LATE_CALLS=0 -- tests/torch/workloads.py --cases graphs \
  --expect-path conccl
runp graphs-spin200ms 2 90 LD_PRELOAD="$SHIM" CONCCL_RENDEZVOUS_SPIN_US=200000 -- tests/torch/workloads.py \
  --cases graphs --expect-path conccl
cd "$O" && tar czf logs.tgz *.log 2>/dev/null && rm -f *.log
