#!/usr/bin/env bash
# The first device call of the next session with 2+ GPUs (docs/next-steps.md, "First thing on a 2-GPU machine"):
# everything built on 2026-12-01 that needs two GPUs and has never run there, the fastest and most decisive first.
# Run THERE from the repo root with gpu-stage/ carried (HERE: scripts/gpu-build.sh). Logs in one tarball under $OUT,
# a summary last; exit status non-zero when any step failed.
#   1. the test-upload fix: Executor.GraphReplayOfLanesSignalsWaitsAndReduce x25 (failed 5-25 of 25 before it);
#   2. issue 12 item 1: test_gpu_no_sm (movement with engine = copy beside a kernel holding every SM);
#   3. issue 15: the chunked all-gather and AllGatherMatmul tests;
#   4. every collective on distinct GPUs, three paths, then memcheck and racecheck of it (issue 13 item 5);
#   5. issue 11 item 3: conccl-bench 128K-64M against NCCL with the graph cache off and on (gpu-graph-cache.sh).
# Env: OUT, BUDGET_S (default 560), SKIP_BENCH=1.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
bin=gpu-stage/bin
OUT="${OUT:-$PWD/gpu-x2-first-out}"
logs="$(mktemp -d)"
mkdir -p "$OUT"
budget="${BUDGET_S:-560}"
start="$(date +%s)"
summary=()
failed=()
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
gpus="${gpus:-0}"
out="$logs"
source "$(dirname "${BASH_SOURCE[0]}")/gpu-steps.sh"  # step NAME LIMIT_S CMD... (gpu-check.sh's)
[ "${gpus:-0}" -ge 2 ] || echo "gpu-x2-first: only ${gpus:-0} GPU(s): the 2-GPU tests will skip, which proves nothing"

step replay-x25 60 "$bin/test_gpu_executor" --gtest_filter='*GraphReplayOf*' --gtest_repeat=25 --gtest_brief=1
step no-sm 120 "$bin/test_gpu_no_sm" --gtest_brief=1
step chunked-all-gather 120 "$bin/test_gpu_chunked_all_gather" --gtest_brief=1
step all-gather-matmul 120 "$bin/test_gpu_all_gather_matmul" --gtest_brief=1
step multigpu 90 "$bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
if command -v compute-sanitizer >/dev/null; then
  step memcheck-multigpu 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
  step racecheck-multigpu 120 compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  step graph-cache-bench 300 env OUT="$logs/graph-cache" PHASES=bench bash scripts/gpu-graph-cache.sh
  cp "$logs/graph-cache/compare.txt" "$OUT/" 2>/dev/null
fi

grep -h "^no-sm " "$logs/no-sm.log" >"$OUT/no-sm.txt" 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$logs" . 2>/dev/null
echo "== gpu-x2-first: $gpus GPU(s), $(($(date +%s) - start)) s"
for line in "${summary[@]}"; do echo "$line"; done
cat "$OUT/no-sm.txt" 2>/dev/null
[ -f "$OUT/compare.txt" ] && head -40 "$OUT/compare.txt"
[ "${#failed[@]}" -eq 0 ]
