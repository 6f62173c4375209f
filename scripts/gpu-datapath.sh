#!/usr/bin/env bash
# The data-path measurements of issue 11 in one call on a 2+ GPU machine (run THERE from the repo root with
# gpu-stage/ carried; build it HERE with scripts/gpu-build.sh). Logs into one tarball under $OUT, JSON beside it,
# a short summary last.
#   1. conccl-kernel-bench: the reduction kernel (fan-in 2..8, fp32/bf16/fp16, 1/4/8 CTAs) and the read probe;
#   2. the GPU correctness tests of the executor and the collectives (both paths);
#   3. conccl-bench across the GPUs, conccl vs NCCL: reductions 1 MB..1 GB, every collective 8 B..64 MB;
#   4. tuning sweeps across every GPU of the machine: CONCCL_SINGLE_STREAM_BYTES, CONCCL_MIN_CHUNK_BYTES, CONCCL_LANES,
#      CONCCL_SMALL_MESSAGE_BYTES (the per-GPU-count defaults: tune-row.txt is that table's row, docs/tuning.md), the
#      copy-engine exchange into scratch (CONCCL_PEER_REDUCE=0) against reading the peers in place, reduction CTAs.
# Env: PHASES (default "kernel tests bench tune"), TUNE (default "ss mc lanes small push ctas"), KERNEL_ARGS.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
stage="${STAGE:-gpu-stage}"
bin="$stage/bin"
OUT="${OUT:-$PWD/gpu-datapath-out}"
mkdir -p "$OUT"
logs="$(mktemp -d)"
phases="${PHASES:-kernel tests bench tune}"
ngpus="$(nvidia-smi -L 2>/dev/null | wc -l)"
summary=()
run_step() {  # run_step NAME LIMIT_S CMD...: log to $logs/NAME.log, remember the exit status and time
  local name="$1" limit="$2"
  shift 2
  local t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-30s rc=%-4s %4ss' "$name" "$rc" "$(($(date +%s) - t0))")")
}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
} >"$logs/machine.txt"
cp "$logs/machine.txt" "$OUT/machine.txt"

if [[ " $phases " == *" kernel "* ]]; then
  # shellcheck disable=SC2086
  run_step kernel-bench 150 "$bin/conccl-kernel-bench" ${KERNEL_ARGS:---read-probe --peer-probe --no-latency --runs 5}
  grep '^#json' "$logs/kernel-bench.log" | sed 's/^#json //' >"$OUT/kernel-bench.jsonl"
  awk '$1=="library" && $5==8 && $3=="sum"' "$logs/kernel-bench.log" | head -30
  grep -E "^(fixed|registers|tma|bulk)" "$logs/kernel-bench.log" | awk '$5==8 || $5==4 || $1 ~ /fixed|bulk|tma-store/' | head -80
  grep -E "^(local|peer) |contention" "$logs/kernel-bench.log"
fi

if [[ " $phases " == *" tests "* ]]; then
  run_step test_gpu_executor 90 "$bin/test_gpu_executor" --gtest_brief=1
  run_step test_gpu_collectives 200 "$bin/test_gpu_collectives" --gtest_brief=1
  run_step test_gpu_graphs 120 "$bin/test_gpu_graphs" --gtest_brief=1
  run_step test_gpu_usage 90 "$bin/test_gpu_usage" --gtest_brief=1
  run_step test_gpu_multiprocess 150 "$bin/test_gpu_multiprocess" --gtest_brief=1
  for t in test_gpu_executor test_gpu_collectives test_gpu_graphs test_gpu_usage test_gpu_multiprocess; do
    grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$logs/$t.log" | head -8 | sed "s/^/$t: /"
  done
fi

if [[ " $phases " == *" bench "* ]] && [ "$ngpus" -ge 2 ]; then
  common=(-g 2 -n 20 -w 5)
  run_step bench-reductions 200 "$bin/conccl-bench" --backend conccl,nccl "${common[@]}" -b 1M -e 1G -f 4 \
    --coll reduce_scatter,all_reduce,reduce --json "$OUT/bench-reductions.jsonl"
  run_step bench-all 200 "$bin/conccl-bench" --backend conccl,nccl "${common[@]}" -b 8 -e 64M -f 8 \
    --coll all_gather,reduce_scatter,all_reduce,broadcast,reduce,all_to_all,gather,scatter,sendrecv \
    --json "$OUT/bench-all.jsonl"
  grep -E "Avg bus bandwidth|rror" "$logs/bench-reductions.log" "$logs/bench-all.log" | head
fi

# The sweeps behind the per-GPU-count defaults (src/core/tuned_defaults.cc, docs/tuning.md), across every GPU here:
# `tools/bench/pick_defaults.py` turns tune.jsonl into that table's row for this GPU count (printed last).
if [[ " $phases " == *" tune "* ]] && [ "$ngpus" -ge 2 ]; then
  mkdir -p "$OUT/tune"
  tune="${TUNE:-ss mc lanes small push ctas}"
  sweep=("$bin/conccl-bench" --backend conccl -g "$ngpus" -n 20 -w 5 -c 0)
  [[ " $tune " == *" ss "* ]] && for ss in 262144 4194304 67108864; do
    CONCCL_SINGLE_STREAM_BYTES=$ss run_step "tune-ss$ss" 60 "${sweep[@]}" -b 128K -e 32M -f 4 \
      --coll all_gather,reduce_scatter,all_reduce,all_to_all --json "$logs/tune-ss$ss.jsonl"
  done
  [[ " $tune " == *" mc "* ]] && for mc in 524288 2097152 8388608 33554432; do
    CONCCL_MIN_CHUNK_BYTES=$mc run_step "tune-mc$mc" 60 "${sweep[@]}" -b 1M -e 256M -f 4 \
      --coll reduce_scatter,all_reduce --json "$logs/tune-mc$mc.jsonl"
  done
  [[ " $tune " == *" lanes "* ]] && for lanes in 1 2; do  # a row never raises lanes above the default 2
    CONCCL_LANES=$lanes run_step "tune-lanes$lanes" 60 "${sweep[@]}" -b 1M -e 256M -f 4 \
      --coll all_gather,reduce_scatter,all_reduce,all_to_all,broadcast --json "$logs/tune-lanes$lanes.jsonl"
  done
  [[ " $tune " == *" small "* ]] && for small in 16384 65536 262144; do
    CONCCL_SMALL_MESSAGE_BYTES=$small run_step "tune-small$small" 60 "${sweep[@]}" -b 4K -e 1M -f 2 \
      --coll all_gather,reduce_scatter,all_reduce,all_to_all,broadcast --json "$logs/tune-small$small.jsonl"
  done
  [[ " $tune " == *" push "* ]] && CONCCL_PEER_REDUCE=0 run_step "tune-push" 90 "${sweep[@]}" -b 1M -e 1G -f 4 \
    --coll reduce_scatter,all_reduce,reduce --json "$logs/tune-push.jsonl"
  [[ " $tune " == *" ctas "* ]] && for ctas in 4 8 16; do
    run_step "tune-ctas$ctas" 60 "${sweep[@]}" -b 16M -e 1G -f 4 \
      --reduce-ctas "$ctas" --coll reduce_scatter,all_reduce --json "$logs/tune-ctas$ctas.jsonl"
  done
  for f in "$logs"/tune-*.jsonl; do  # one file, each row tagged with its step
    tag="$(basename "$f" .jsonl)"
    sed "s/^{/{\"tune\":\"$tag\",/" "$f"
  done >"$OUT/tune.jsonl"
  python3 tools/bench/pick_defaults.py --gpus "$ngpus" "$OUT/tune.jsonl" >"$OUT/tune-row.txt" 2>&1
fi

tar -czf "$OUT/logs.tgz" -C "$logs" . 2>/dev/null
echo "== gpu-datapath: $ngpus GPU(s)"
for line in "${summary[@]}"; do echo "$line"; done
[ -s "$OUT/tune-row.txt" ] && { echo "== per-GPU-count defaults from the sweep (tools/bench/pick_defaults.py)"; cat "$OUT/tune-row.txt"; }
