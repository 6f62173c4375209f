#!/usr/bin/env bash
# Issue 13's remaining GPU steps on a 2-GPU machine, in order of importance, each bounded: the long soak
# (100,000 copy-engine calls, grouped and thread-per-rank), compute-sanitizer memcheck across 2 GPUs
# (MultiGpu.AllCollectivesAcrossDevices: every collective, both paths), racecheck and memcheck of the executor's
# signaller-first tests. Logs under $OUT.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS=32
OUT="${OUT:-$PWD/gpu-sanitize-out}"
mkdir -p "$OUT"
bin=gpu-stage/bin
step() {  # step NAME LIMIT CMD...
  local name="$1" limit="$2"; shift 2
  local t0=$(date +%s)
  timeout --kill-after=5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  echo "$name rc=$? $(($(date +%s) - t0))s"
}
step soak-100k 60 env CONCCL_SOAK_CALLS=100000 "$bin/test_gpu_soak" --gtest_brief=1
grep -E "^soak |PASSED|FAILED" "$OUT/soak-100k.log"
step memcheck-multigpu 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/test_gpu_collectives" \
  --gtest_brief=1 --gtest_filter='MultiGpu.*'
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck-multigpu.log" | head -3
step racecheck-executor 40 compute-sanitizer --tool racecheck --error-exitcode 9 "$bin/test_gpu_executor" \
  --gtest_brief=1 --gtest_filter='Executor.LanesSignalsWaitsAndReduce'
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED" "$OUT/racecheck-executor.log" | head -3
step memcheck-executor 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/test_gpu_executor" \
  --gtest_brief=1 --gtest_filter='Executor.LanesSignalsWaitsAndReduce:Executor.CheckBufferMessages'
grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck-executor.log" | head -3
