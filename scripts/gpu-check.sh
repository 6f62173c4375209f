#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, with gpu-stage/ carried (see scripts/gpu-build.sh):
# every staged GPU test binary, compute-sanitizer memcheck and racecheck on a short filter, and the kernel
# bench. Full logs go to $OUT (or ./gpu-check-out); a compact summary is printed last.
# Env: STAGE (default gpu-stage), BUDGET_S (wall-clock budget of the whole script, default 540),
#      BENCH_ARGS (default "-g 4 -n 100"), SKIP_SANITIZER=1, SKIP_BENCH=1, GTEST_FILTER,
#      SOAK_CALLS (default 2000: the short soak; 100000 for the long one of issue 13).
# Exit status: 0 only when every step passed. A step fails when its command fails or times out, and -- on a
# machine where `nvidia-smi -L` lists GPUs -- when a test binary ran no test or skipped every test it ran (a
# binary that cannot see the GPU must not read as PASS).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"

# Several ranks share one GPU in the tests: give every stream its own hardware queue (see docs/cuda-executor.md).
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"

stage="${STAGE:-gpu-stage}"
out="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$out"
budget="${BUDGET_S:-540}"
start="$(date +%s)"
summary=()

source "$(dirname "${BASH_SOURCE[0]}")/gpu-steps.sh"  # step NAME LIMIT_S CMD...
failed=()
# GPUs the operating system shows: where there are some, a test binary that skips everything has failed.
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
gpus="${gpus:-0}"

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
  nvcc --version 2>/dev/null | tail -1
} >"$out/machine.txt"

filter=()
[ -n "${GTEST_FILTER:-}" ] && filter=(--gtest_filter="$GTEST_FILTER")

# Cheapest and most fundamental first, the bench early (its figures matter even if a later test hangs), so a
# hang late in the list costs the least.
[ -x "$stage/bin/test_gpu_executor" ] && step test_gpu_executor 60 "$stage/bin/test_gpu_executor" --gtest_brief=1 "${filter[@]}"
if [ "${SKIP_BENCH:-0}" != 1 ] && [ -x "$stage/bin/conccl-kernel-bench" ]; then
  # shellcheck disable=SC2086
  step conccl-kernel-bench 100 "$stage/bin/conccl-kernel-bench" ${BENCH_ARGS:--g 4 -n 100}
fi
[ -x "$stage/bin/test_gpu_collectives" ] && step test_gpu_collectives 150 "$stage/bin/test_gpu_collectives" --gtest_brief=1 "${filter[@]}"
[ -x "$stage/bin/test_gpu_usage" ] && step test_gpu_usage 90 "$stage/bin/test_gpu_usage" --gtest_brief=1 "${filter[@]}"
[ -x "$stage/bin/test_gpu_graphs" ] && step test_gpu_graphs 200 "$stage/bin/test_gpu_graphs" --gtest_brief=1 "${filter[@]}"
# Issue 13: the shared-GPU deadlock (20 fresh communicators x ranks {3,4,5} x 3 collectives, thread per rank).
[ -x "$stage/bin/test_gpu_no_hang" ] && step test_gpu_no_hang 150 "$stage/bin/test_gpu_no_hang" --gtest_brief=1 \
  --gtest_filter="${GTEST_FILTER:-NoHang.*:Watchdog.*}"
# The soak: short by default (SOAK_CALLS=100000 for the long one).
[ -x "$stage/bin/test_gpu_soak" ] && step test_gpu_soak "$(( ${SOAK_CALLS:-2000} / 200 + 60 ))" \
  env CONCCL_SOAK_CALLS="${SOAK_CALLS:-2000}" "$stage/bin/test_gpu_soak" --gtest_brief=1 "${filter[@]}"
for bin in "$stage"/bin/test_gpu_*; do  # any other GPU test binary
  t="$(basename "$bin")"
  case " test_gpu_executor test_gpu_collectives test_gpu_usage test_gpu_graphs test_gpu_no_hang test_gpu_soak " in
    *" $t "*) continue ;;
  esac
  # Binaries whose every test needs 2 GPUs: not run (and not failed for skipping) on one.
  if [ "$t" = test_gpu_no_sm ] && [ "$gpus" -lt 2 ]; then
    summary+=("$(printf '%-34s NOT RUN (needs 2 GPUs, %s here)' "$t" "$gpus")")
    continue
  fi
  # The multi-process suite starts 2-4 processes per test: ~150 s on one GPU (docs/next-steps.md), less across GPUs.
  limit=120
  [ "$t" = test_gpu_multiprocess ] && limit=240
  step "$t" "$limit" "$bin" --gtest_brief=1 "${filter[@]}"
done
# CUDA_DEVICE_MAX_CONNECTIONS=1 (what Megatron-LM and TransformerEngine set): one rank per GPU must work.
if [ "$gpus" -ge 2 ] && [ -x "$stage/bin/test_gpu_collectives" ]; then
  step collectives-connections-1 120 env CUDA_DEVICE_MAX_CONNECTIONS=1 "$stage/bin/test_gpu_collectives" \
    --gtest_brief=1 --gtest_filter='MultiGpu.*'
  # One process per GPU (2 ranks on 2 GPUs), the way torchrun runs Megatron-LM.
  [ -x "$stage/bin/test_gpu_multiprocess" ] && step multiprocess-connections-1 120 env CUDA_DEVICE_MAX_CONNECTIONS=1 \
    "$stage/bin/test_gpu_multiprocess" --gtest_brief=1 --gtest_filter='Ranks/MultiProcess.*/0'
fi

if [ "${SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
  # Tests whose ranks are enqueued signaller-first: the sanitizer may serialise streams, and a Wait enqueued
  # before the Signal it needs would then never finish.
  short='Executor.LanesSignalsWaitsAndReduce:Executor.CheckBufferMessages:ReduceKernel.RejectsTooManyInputsAndFp8'
  step memcheck-executor 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$stage/bin/test_gpu_executor" --gtest_brief=1 --gtest_filter="$short"
  step memcheck-collectives 60 compute-sanitizer --tool memcheck --error-exitcode 9 \
    "$stage/bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='*/Collectives.*/*_1ranks_*'
  step racecheck-executor 45 compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$stage/bin/test_gpu_executor" --gtest_brief=1 --gtest_filter="Executor.LanesSignalsWaitsAndReduce"
  if [ "$gpus" -ge 2 ]; then
    # Issue 13 item 5: both tools across GPUs (every collective, every path, ranks on distinct GPUs). API return
    # codes are not memory errors: cudaDeviceEnablePeerAccess answers cudaErrorPeerAccessAlreadyEnabled when a
    # second communicator enables it again, which the executor expects and clears (2026-11-30 run 6).
    step memcheck-multigpu 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
      "$stage/bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
    step racecheck-multigpu 150 compute-sanitizer --tool racecheck --error-exitcode 9 \
      "$stage/bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
  fi
fi

echo
echo "================ gpu-check summary ($(($(date +%s) - start)) s, logs in $out) ================"
cat "$out/machine.txt"
for line in "${summary[@]}"; do echo "$line"; done
# Failing tests by name, and the key figures of the bench.
for log in "$out"/test_gpu_*.log; do
  [ -f "$log" ] || continue
  grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | head -8 | sed "s|^|$(basename "$log" .log): |"
done
if [ -f "$out/conccl-kernel-bench.log" ]; then
  grep -E '^(bf16|fp32) +(1|4|8|132) ' "$out/conccl-kernel-bench.log"
  grep -E '^(AllReduce|AllGather|ReduceScatter) +(8|8192|1048576) ' "$out/conccl-kernel-bench.log"
fi
for log in "$out"/memcheck-*.log "$out"/racecheck-*.log; do
  [ -f "$log" ] && grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1 | sed "s|^|$(basename "$log" .log): |"
done
[ -f "$out/test_gpu_soak.log" ] && grep -E '^soak ' "$out/test_gpu_soak.log"
if [ "${#failed[@]}" -gt 0 ]; then
  echo "gpu-check: FAILED: ${failed[*]}"
  exit 1
fi
echo "gpu-check: all steps passed"
exit 0
