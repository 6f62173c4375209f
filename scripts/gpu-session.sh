#!/usr/bin/env bash
# All the GPU work of one session in one call (run THERE, from the repo root, with gpu-stage/ carried; build
# it HERE first with scripts/gpu-build.sh):
#   1. scripts/gpu-check.sh: GPU tests, compute-sanitizer, reduction-kernel bench and per-call latency;
#   2. with 2+ GPUs: the copy-engine probe, conccl-bench conccl vs nccl vs nccl-ce across GPUs, conccl-c3.
# The device tool returns at most 8 files from $OUT: logs go into one tarball, results into a few JSON files.
# Env: PHASES (default "check multi single"; also "procs": multi-process example, PyTorch snippet, copy-engine-only
#      latency), CHECK_BUDGET_S (gpu-check budget), BENCH_MAX (default 512M),
#      C3_GRID (default small), LANES_SWEEP (e.g. "1 2 4").
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
stage="${STAGE:-gpu-stage}"
OUT="${OUT:-$PWD/gpu-session-out}"
mkdir -p "$OUT"
logs="$(mktemp -d)"
phases="${PHASES:-check multi single}"
ngpus="$(nvidia-smi -L 2>/dev/null | wc -l)"
summary=()
run_step() {  # run_step NAME LIMIT_S CMD...: log to $logs/NAME.log, remember the exit status
  local name="$1" limit="$2"
  shift 2
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-26s rc=%-4s %4ss' "$name" "$rc" "$(($(date +%s) - t0))")")
}

if [[ " $phases " == *" check "* ]]; then
  OUT="$logs/check" BUDGET_S="${CHECK_BUDGET_S:-330}" bash "$stage/scripts/gpu-check.sh" >"$logs/gpu-check.txt" 2>&1
  sed -n '/gpu-check summary/,$p' "$logs/gpu-check.txt"
fi

if [[ " $phases " == *" procs "* ]]; then
  # One process per rank (concclCommInitRank): the example launcher, the PyTorch snippet of docs/multiprocess.md
  # (when a Python with torch is on the machine), nothing left in /dev/shm; then the copy-engine-only latency
  # (small-message kernel off) for comparison with gpu-check's kernel bench.
  bin="$stage/bin"
  # The example links the shared library, staged in $stage/lib.
  export LD_LIBRARY_PATH="$PWD/$stage/lib:$LD_LIBRARY_PATH"
  run_step example-2procs 60 "$bin/multiprocess_allreduce" 2
  run_step example-4procs 90 "$bin/multiprocess_allreduce" 4
  cat "$logs/example-2procs.log" "$logs/example-4procs.log"
  py=/opt/torch/.venv/bin/python
  if [ -x "$py" ] && [ -f "$stage/lib/libconccl.so.0" ] && [ -f "$stage/scripts/conccl_allreduce.py" ]; then
    CONCCL_LIB="$PWD/$stage/lib/libconccl.so.0" run_step torch-2procs 120 "$py" -m torch.distributed.run \
      --nproc-per-node=2 "$stage/scripts/conccl_allreduce.py"
    grep -E "OK|rror" "$logs/torch-2procs.log" | head -6
  fi
  echo "/dev/shm conccl entries after the runs: $(ls /dev/shm | grep -c conccl)"
  CONCCL_SMALL_MESSAGE_BYTES=0 run_step kernel-bench-ce-only 120 "$bin/conccl-kernel-bench" -g 2 -n 30
  cp "$logs/kernel-bench-ce-only.log" "$OUT/kernel-bench-ce-only.txt"
fi

if [[ " $phases " == *" multi "* ]] && [ "$ngpus" -ge 2 ]; then
  bin="$stage/bin"
  nvidia-smi topo -m >"$OUT/topo.txt" 2>&1
  run_step ce-probe 90 "$bin/conccl-ce-probe" 1073741824 200
  grep -E "^(same|peer|verdict)" "$logs/ce-probe.log"
  common=(-g "$ngpus" -n 20 -w 5)
  for lanes in ${LANES_SWEEP:-}; do
    run_step "bench-lanes$lanes" 120 "$bin/conccl-bench" --backend conccl "${common[@]}" -b 1M -e 256M -f 16 \
      --coll all_gather,reduce_scatter --lanes "$lanes" --json "$logs/bench-lanes$lanes.jsonl"
  done
  run_step bench-main 300 "$bin/conccl-bench" --backend conccl,nccl,nccl-ce "${common[@]}" -b 8 -e "${BENCH_MAX:-512M}" -f 4 \
    --coll all_gather,all_to_all,reduce_scatter,all_reduce --json "$OUT/bench-main.jsonl"
  grep -E "Avg bus bandwidth|WARN|rror" "$logs/bench-main.log" | head -20
  run_step bench-rest 150 "$bin/conccl-bench" --backend conccl,nccl "${common[@]}" -b 8 -e 64M -f 8 \
    --coll broadcast,reduce,gather,scatter,sendrecv --json "$OUT/bench-rest.jsonl"
  grep -E "Avg bus bandwidth" "$logs/bench-rest.log"
  run_step c3 240 "$bin/conccl-c3" -g "$ngpus" --grid "${C3_GRID:-small}" --json "$OUT/c3.json"
  tail -30 "$logs/c3.log"
fi

if [[ " $phases " == *" single "* ]]; then
  bin="$stage/bin"
  # One GPU: ranks share it, so these are correctness and API-overhead numbers, not copy-engine numbers
  # (the tools print that warning). NCCL refuses two ranks on one GPU, so conccl runs alone here.
  run_step bench-1gpu 110 "$bin/conccl-bench" --backend conccl --devices 0,0 -n 20 -w 5 -b 8 -e 256M -f 8 \
    --coll all_gather,all_to_all,reduce_scatter,all_reduce,broadcast,reduce,gather,scatter,sendrecv \
    --json "$OUT/bench-1gpu.jsonl"
  grep -E "Avg bus bandwidth|WARN|wrong" "$logs/bench-1gpu.log" | head -20
  run_step bench-1gpu-graph 50 "$bin/conccl-bench" --backend conccl --devices 0,0 -n 20 -w 5 -b 8 -e 1M -f 32 -G 1 \
    --coll all_gather,reduce_scatter,all_reduce
  grep -E "Avg bus bandwidth" "$logs/bench-1gpu-graph.log"
  run_step c3-sm-sweep 100 "$bin/conccl-c3" --sm-sweep --json "$OUT/c3-sm-sweep.json"
  grep -E "green-ctx" "$logs/c3-sm-sweep.log" | head -6
  # One rank per backend exercises every backend's code path (NCCL's copy-engine mode included) on one GPU.
  run_step bench-1rank 90 "$bin/conccl-bench" --backend conccl,nccl,nccl-ce -g 1 -n 20 -w 5 -b 8 -e 64M -f 8 \
    --coll all_gather,all_to_all,reduce_scatter,all_reduce --json "$OUT/bench-1rank.jsonl"
  grep -E "Avg bus bandwidth|WARN|rror|nccl-ce" "$logs/bench-1rank.log" | head -20
  run_step c3-1rank 150 "$bin/conccl-c3" -g 1 --grid small --json "$OUT/c3-1rank.json"
  tail -32 "$logs/c3-1rank.log"
fi

tar -czf "$OUT/logs.tgz" -C "$logs" . 2>/dev/null
echo "== gpu-session: $ngpus GPU(s)"
for line in "${summary[@]}"; do echo "$line"; done
