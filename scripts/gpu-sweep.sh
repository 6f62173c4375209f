#!/usr/bin/env bash
# The 2-GPU sweep of issue 11 in one call (run THERE, from the repo root, with gpu-stage/ carried; build it HERE
# first: scripts/gpu-build.sh, then scripts/build-nccl-tests.sh <nccl-tests source>):
#   conccl-bench, backends conccl and nccl side by side, all nine collectives, 8 B..64 MB factor 2 (checked) and
#   256 MB..4 GB factor 4 (unchecked), once with -g 2 (one thread, groups) and once with -t 2 -g 1 (a thread per
#   rank); NVIDIA's nccl-tests *_perf with -g 2 and -t 2 -g 1 over 8 B..4 GB factor 2 with -c 1.
# Writes to $OUT (the device tool returns at most 8 files): bench-<mode>.jsonl, nccl-tests-<mode>.txt, logs.tgz,
# summary.txt; prints the summary last (tools/bench/sweep_summary.py). Plot and table here afterwards:
#   tools/bench/plot_bench.py --bench OUT/bench-g.jsonl --nccl-tests OUT/nccl-tests-g.txt --png busbw.png --md t.md
# Whole run <= ~6 min (BUDGET_S); every step has its own timeout and none starts past the budget.
# Env: MODES ("g t"), COLLS (comma list, default all nine), BACKENDS (conccl,nccl), SMALL_MAX (64M),
#      BENCH_MAX (4G; 1G or 256M to shorten, below 256M: no large step), ITERS (20), WARMUP (5),
#      NCCL_TESTS (1; 0 skips them), NGPUS (2), BUDGET_S (345), STAGE (gpu-stage).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
stage="${STAGE:-gpu-stage}"
OUT="${OUT:-$PWD/gpu-sweep-out}"
mkdir -p "$OUT"
logs="$(mktemp -d)"
t_start=$(date +%s)
budget="${BUDGET_S:-345}"
modes="${MODES:-g t}"
colls="${COLLS:-all_gather,reduce_scatter,all_reduce,broadcast,reduce,all_to_all,gather,scatter,sendrecv}"
backends="${BACKENDS:-conccl,nccl}"
small_max="${SMALL_MAX:-64M}"
bench_max="${BENCH_MAX:-4G}"
iters="${ITERS:-20}"
warmup="${WARMUP:-5}"
ngpus="${NGPUS:-2}"
summary=()

run_step() {  # run_step NAME LIMIT_S CMD...: log to $logs/NAME.log; never past the budget (10 s kept for the end)
  local name="$1" limit="$2"
  shift 2
  local left=$((budget - ($(date +%s) - t_start) - 10))
  if [ "$left" -lt 5 ]; then
    summary+=("$(printf '%-26s skipped (budget)' "$name")")
    return
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  local t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-26s rc=%-4s %4ss (limit %ss)' "$name" "$rc" "$(($(date +%s) - t0))" "$limit")")
}

mode_flags() {  # g: one thread drives both ranks in groups; t: a thread per rank
  if [ "$1" = t ]; then echo "-t $ngpus -g 1"; else echo "-g $ngpus"; fi
}

bytes_of() {  # 64M -> bytes
  local v="${1%[KMGkmg]}" u="${1: -1}"
  case "$u" in K | k) echo $((v << 10)) ;; M | m) echo $((v << 20)) ;; G | g) echo $((v << 30)) ;; *) echo "$1" ;; esac
}

nt_dir=""
if [ "${NCCL_TESTS:-1}" = 1 ]; then
  if [ -f "$stage/nccl-tests.tar.xz" ]; then
    nt_dir="$(mktemp -d)"
    tar -xJf "$stage/nccl-tests.tar.xz" -C "$nt_dir" && nt_dir="$nt_dir/nccl-tests"
  elif [ -d "$stage/nccl-tests" ]; then
    nt_dir="$stage/nccl-tests"
  else
    echo "gpu-sweep: no $stage/nccl-tests.tar.xz (scripts/build-nccl-tests.sh): nccl-tests skipped"
  fi
fi

bench="$stage/bin/conccl-bench"
nvidia-smi -L >"$logs/gpus.txt" 2>&1

bench_step() {  # bench_step MODE small|large
  local mode="$1" part="$2"
  local common=(--backend "$backends" $(mode_flags "$mode") -n "$iters" -w "$warmup" --coll "$colls")
  # Checked up to SMALL_MAX; above it unchecked, so that host-side data generation and checking of gigabytes
  # do not take the budget (the inputs are still random, see driver.cc).
  if [ "$part" = small ]; then
    run_step "bench-$mode-small" 120 "$bench" "${common[@]}" -b 8 -e "$small_max" -f 2 -c 1 \
      --json "$logs/bench-$mode-small.jsonl"
  elif [ "$(bytes_of "$bench_max")" -ge $((256 << 20)) ]; then
    run_step "bench-$mode-large" 150 "$bench" "${common[@]}" -b 256M -e "$bench_max" -f 4 -c 0 \
      --json "$logs/bench-$mode-large.jsonl"
  fi
}

nccl_tests_steps() {  # nccl_tests_steps MODE: every *_perf of COLLS, one combined log per mode
  local mode="$1" stem coll
  [ -n "$nt_dir" ] || return
  : >"$OUT/nccl-tests-$mode.txt"
  for stem in all_gather reduce_scatter all_reduce broadcast reduce alltoall gather scatter sendrecv; do
    coll="$stem"
    [ "$stem" = alltoall ] && coll=all_to_all
    [[ ",$colls," == *",$coll,"* ]] || continue
    local args=(-b 8 -e "$bench_max" -f 2 $(mode_flags "$mode") -c 1 -n "$iters" -w "$warmup")
    run_step "nt-$mode-$stem" 40 "$nt_dir/${stem}_perf" "${args[@]}"
    echo "# nccl-tests: ${stem}_perf ${args[*]}" >>"$OUT/nccl-tests-$mode.txt"
    cat "$logs/nt-$mode-$stem.log" >>"$OUT/nccl-tests-$mode.txt" 2>/dev/null
  done
}

# Most important first, should the budget run out: the -g mode whole, then the -t mode's small sizes and
# nccl-tests (host cost shows at small sizes), its large sizes last.
for mode in $modes; do
  bench_step "$mode" small
  [ "$mode" = g ] && bench_step "$mode" large
  nccl_tests_steps "$mode"
done
for mode in $modes; do
  [ "$mode" != g ] && bench_step "$mode" large
done
for mode in $modes; do
  cat "$logs"/bench-"$mode"-*.jsonl >"$OUT/bench-$mode.jsonl" 2>/dev/null
  grep -hE "Out of bounds|: error:|unavailable" "$logs"/bench-"$mode"-*.log 2>/dev/null | sed "s/^/$mode: /" | head -6
done

tar -czf "$OUT/logs.tgz" -C "$logs" . 2>/dev/null
py="$(command -v python3 || echo /opt/torch/.venv/bin/python)"
sum_args=()
for mode in $modes; do
  sum_args+=(--bench "$mode=$OUT/bench-$mode.jsonl")
  [ -f "$OUT/nccl-tests-$mode.txt" ] && sum_args+=(--nccl-tests "$mode=$OUT/nccl-tests-$mode.txt")
done
{
  echo "== gpu-sweep: $(grep -c GPU "$logs/gpus.txt") GPU(s), modes '$modes', $(($(date +%s) - t_start)) s"
  for line in "${summary[@]}"; do echo "$line"; done
  "$py" tools/bench/sweep_summary.py "${sum_args[@]}" 2>&1
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
