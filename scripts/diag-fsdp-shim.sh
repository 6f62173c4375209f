#!/usr/bin/env bash
# Diagnoses a stalled FSDP2 run through the NCCL drop-in (how the 2026-12-01 hang was found: docs/cuda-executor.md,
# Hazard 6). Two ranks started by hand (no torchrun, so that signals reach them), stopped after LIMIT seconds if still
# running: GPU utilisation, each thread's kernel wait channel, native backtraces of the running threads (with BT_LIB,
# built here by `gcc -shared -fPIC -o gpu-stage/lib/libbt_on_signal.so scripts/bt_on_signal.c`), then SIGABRT for the
# Python tracebacks (PYTHONFAULTHANDLER). Run THERE from the repo root with gpu-stage carried; logs under $OUT.
# Env: NAME, LIMIT (s, default 40), STEPS (default 60), CONCCL_DEBUG (default INFO), EXTRA_ENV (e.g.
# CONCCL_TIMEOUT_MS=10000: the GPU watchdog then names the call that does not complete), BT_LIB.
source scripts/gpu-env.sh
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
PY=/opt/torch/.venv/bin/python
attempt() {  # NAME LIMIT_S STEPS ENV...
  local name=$1 limit=$2 steps=$3; shift 3
  local pids=() port=$((29500 + RANDOM % 1000))
  for r in 0 1; do
    env "$@" LD_PRELOAD=$PWD/gpu-stage/lib/libconccl_nccl.so${BT_LIB:+:$BT_LIB} \
      CONCCL_NCCL_REAL_LIB=$NCCL_LIB/libnccl.so.2 \
      LD_LIBRARY_PATH=$NCCL_LIB:${LD_LIBRARY_PATH:-} PYTHONFAULTHANDLER=1 RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      $PY tests/torch/shim_fsdp2.py --steps $steps --out $OUT/$name.json > $OUT/$name-r$r.log 2>&1 &
    pids+=($!)
    [ $r = 0 ] && sleep 1
  done
  local t=0
  while [ $t -lt $limit ] && kill -0 ${pids[@]} 2>/dev/null; do sleep 1; t=$((t+1)); done
  if kill -0 ${pids[0]} 2>/dev/null || kill -0 ${pids[1]} 2>/dev/null; then
    nvidia-smi --query-gpu=utilization.gpu --format=csv > $OUT/$name-smi.txt 2>&1
    for p in ${pids[@]}; do
      # The python process is env's child when env execs: env execs, so $p is python itself.
      if command -v gdb >/dev/null; then
        timeout 60 gdb -batch -p $p -ex "thread apply all bt 25" > $OUT/$name-gdb-$p.txt 2>&1
      else
        if [ -n "${BT_LIB:-}" ]; then  # native backtraces of the running threads (and the main thread)
          for t in /proc/$p/task/*; do
            tid=${t##*/}
            if [ "$(cat $t/wchan 2>/dev/null)" = 0 ] || [ "$tid" = "$p" ]; then
              /opt/torch/.venv/bin/python -c "import ctypes,sys; ctypes.CDLL(None).syscall(234, $p, $tid, 12)"
              sleep 0.3
            fi
          done
          sleep 1
        fi
        for t in /proc/$p/task/*; do
          echo "$(cat $t/comm) wchan=$(cat $t/wchan 2>/dev/null) $(cat $t/syscall 2>/dev/null | cut -d' ' -f1)"
        done > $OUT/$name-tasks-$p.txt 2>&1
      fi
    done
    kill -ABRT ${pids[@]} 2>/dev/null; sleep 3; kill -9 ${pids[@]} 2>/dev/null
    echo "$name: STUCK after ${limit}s"
  else
    echo "$name: finished in ${t}s"
  fi
  wait 2>/dev/null
  grep -h "step\|fsdp2:" $OUT/$name-r0.log | tail -4
}
which gdb eu-stack py-spy > $OUT/tools.txt 2>&1
attempt ${NAME:-dbg60} ${LIMIT:-40} ${STEPS:-60} CONCCL_DEBUG=${CONCCL_DEBUG:-INFO} ${EXTRA_ENV:-}
