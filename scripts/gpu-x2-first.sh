#!/usr/bin/env bash
# The first device call with 2+ GPUs (docs/next-steps.md, "First thing on a 2-GPU machine"): everything that needs
# two GPUs and has never run there, the most decisive first, within one call's budget.
# Run THERE from the repo root with gpu-stage/ carried (HERE: scripts/gpu-build.sh). Logs in one tarball under $OUT,
# a summary last; exit status non-zero when any step failed.
#   1. issue 12 item 1: test_gpu_no_sm (movement with engine = copy beside a kernel holding every SM);
#   2. issue 15: the chunked all-gather / reduce-scatter tests and both fused ops, now across GPUs;
#   3. issue 15 item 3: conccl-tp-bench, a short check + the 70B shapes (gpu-tp-bench.sh), if staged;
#   4. every collective on distinct GPUs, three paths (MultiGpu.*); staged calls with a GPU per process;
#   5. issue 11 item 3: conccl-bench 128K-64M against NCCL with the graph cache off and on (gpu-graph-cache.sh);
#   6. thread-per-rank staged calls (test + conccl-bench -t 2 on and off); the handshake probe across GPUs
#      (conccl-kernel-bench --flag-probe), if staged;
#   7. memcheck and racecheck of MultiGpu.* (issue 13 item 5), with what budget is left.
# Env: OUT, BUDGET_S (default 420), SKIP_BENCH=1.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
bin=gpu-stage/bin
OUT="${OUT:-$PWD/gpu-x2-first-out}"
logs="$(mktemp -d)"
mkdir -p "$OUT"
budget="${BUDGET_S:-420}"
start="$(date +%s)"
summary=()
failed=()
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
gpus="${gpus:-0}"
out="$logs"
source "$(dirname "${BASH_SOURCE[0]}")/gpu-steps.sh"  # step NAME LIMIT_S CMD... (gpu-check.sh's)
[ "${gpus:-0}" -ge 2 ] || echo "gpu-x2-first: only ${gpus:-0} GPU(s): the 2-GPU tests will skip, which proves nothing"

step no-sm 120 "$bin/test_gpu_no_sm" --gtest_brief=1
step chunked-all-gather 60 "$bin/test_gpu_chunked_all_gather" --gtest_brief=1
step chunked-reduce-scatter 60 "$bin/test_gpu_chunked_reduce_scatter" --gtest_brief=1
step all-gather-matmul 60 "$bin/test_gpu_all_gather_matmul" --gtest_brief=1
step matmul-reduce-scatter 60 "$bin/test_gpu_matmul_reduce_scatter" --gtest_brief=1
if [ -x "$bin/conccl-tp-bench" ]; then
  step tp-bench 150 env OUT="$logs/tp" CHECK_TOKENS=2048 CHECK_LIMIT_S=60 BENCH_LIMIT_S=80 \
    bash scripts/gpu-tp-bench.sh "$logs/tp" --models llama3-70b
  cp "$logs/tp/"*.txt "$OUT/" 2>/dev/null
fi
step multigpu 90 "$bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
# Staged calls across processes (a GPU per process at 2 ranks): correctness both ways, no wait for late peers, and the
# hot-path host time of staged AllReduce / AllGather against the regular path's (their logs print it).
step mp-staged 120 "$bin/test_gpu_multiprocess" \
  --gtest_filter='*StagedCalls*/0:*EveryCollectiveMatchesTheReference*/0:*Staged.*'
grep -h "host time\|staged calls" "$logs/mp-staged.log" >"$OUT/mp-staged.txt" 2>/dev/null
# Thread-per-rank staged calls in one process (off by default until this measures them, docs/multiprocess.md): the test
# with a GPU per rank, then conccl-bench -t 2 with CONCCL_THREAD_STAGED=0 and 1 (host time and time per call).
if [ -x "$bin/test_gpu_thread_staged" ]; then
  step thread-staged 90 "$bin/test_gpu_thread_staged" --gtest_brief=1
  if [ "${SKIP_BENCH:-0}" != 1 ]; then
    for ts in 0 1; do
      step "thread-staged-bench-$ts" 60 env CONCCL_THREAD_STAGED=$ts "$bin/conccl-bench" --backend conccl -t 2 -g 1 \
        --devices 0,1 -b 8 -e 8M -f 4 --coll all -n 30 -w 5 -c 1 --json "$logs/thread-staged-$ts.jsonl"
    done
  fi
fi
# One handshake across the GPUs, flags in host vs device memory (a few seconds; docs/next-steps.md, "Open levers").
if [ -x "$bin/conccl-kernel-bench" ]; then
  step flag-probe 30 "$bin/conccl-kernel-bench" --no-reduce --no-latency --flag-probe --runs 5
  grep -h "^flag-probe" "$logs/flag-probe.log" >"$OUT/flag-probe.txt" 2>/dev/null
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  step graph-cache-bench 150 env OUT="$logs/graph-cache" PHASES=bench bash scripts/gpu-graph-cache.sh
  cp "$logs/graph-cache/compare.txt" "$OUT/" 2>/dev/null
fi
if command -v compute-sanitizer >/dev/null; then
  step memcheck-multigpu 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
  step racecheck-multigpu 120 compute-sanitizer --tool racecheck --error-exitcode 9 \
    "$bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
fi

grep -h "^no-sm " "$logs/no-sm.log" >"$OUT/no-sm.txt" 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$logs" . 2>/dev/null
echo "== gpu-x2-first: $gpus GPU(s), $(($(date +%s) - start)) s"
for line in "${summary[@]}"; do echo "$line"; done
cat "$OUT/no-sm.txt" "$OUT/mp-staged.txt" 2>/dev/null
[ -f "$OUT/compare.txt" ] && head -40 "$OUT/compare.txt"
[ "${#failed[@]}" -eq 0 ]
