#!/usr/bin/env bash
# Run 2 (one H200, 2026-12-04, session 38), from the repository root with gpu-stage/ carried (TARGETS="test_gpu_capture_mode
# test_gpu_multiprocess conccl_mp_worker" scripts/gpu-build.sh), after the capture watch (exec/cuda/capture_watch.h:
# the closer of retired peer mappings holds its device-wide wait back while a capture seen by a call is in progress):
#   1. test_gpu_capture_mode (relaxed allocation beside a global capture; a device-wide wait breaks it whatever the
#      mode; the watch sees a call's capture until it ends);
#   2. the reference scenarios (staged and unstaged, 2-4 processes), up to four rounds;
#   3. ChunkedCallsAcrossProcesses twice (it hung at 4 processes in run 1);
#   4. the rest of test_gpu_multiprocess but the host-time-under-skew bound, in what time is left.
# Workers are stopped by the test after CONCCL_TEST_WORKER_LIMIT_S and print a backtrace per thread first
# (libbt_on_signal preloaded), so a hang is reported with its logs. Output under $OUT: *.log.gz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
BT="$PWD/gpu-stage/lib/libbt_on_signal.so"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
verdicts() { grep -a -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran|still running' "$1" | head -20 | cut -c1-200 | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
t0=$SECONDS
timeout 60 gpu-stage/bin/test_gpu_capture_mode >"$OUT/capture-mode.log" 2>&1
say "test_gpu_capture_mode: rc=$? ($((SECONDS - t0)) s)"; verdicts "$OUT/capture-mode.log"
for i in 1 2 3 4; do
  [ $SECONDS -lt 200 ] || { say "reference round $i skipped (budget)"; continue; }
  t0=$SECONDS
  CONCCL_TEST_WORKER_LIMIT_S=75 LD_PRELOAD="$BT" timeout 170 gpu-stage/bin/test_gpu_multiprocess \
    --gtest_filter='*EveryCollectiveMatchesTheReference*' >"$OUT/reference-$i.log" 2>&1
  say "reference scenarios, round $i: rc=$? ($((SECONDS - t0)) s)"; verdicts "$OUT/reference-$i.log"
done
for i in 1 2; do
  t0=$SECONDS
  CONCCL_TEST_WORKER_LIMIT_S=60 LD_PRELOAD="$BT" timeout 100 gpu-stage/bin/test_gpu_multiprocess \
    --gtest_filter='*ChunkedCallsAcrossProcesses*' >"$OUT/chunked-$i.log" 2>&1
  say "ChunkedCallsAcrossProcesses, round $i: rc=$? ($((SECONDS - t0)) s)"; verdicts "$OUT/chunked-$i.log"
done
left=$((580 - SECONDS))
if [ $left -gt 60 ]; then
  t0=$SECONDS
  CONCCL_TEST_WORKER_LIMIT_S=$((left - 20 < 120 ? left - 20 : 120)) LD_PRELOAD="$BT" timeout $left gpu-stage/bin/test_gpu_multiprocess \
    --gtest_filter='-*CallsDoNotWaitForLatePeers*:*DeferredCallsDoNotWaitForLatePeers*:*CrossNode*:*EveryCollectiveMatchesTheReference*:*ChunkedCallsAcrossProcesses*' \
    >"$OUT/multiprocess-rest.log" 2>&1
  say "test_gpu_multiprocess (the rest but the skew bound and CrossNode): rc=$? ($((SECONDS - t0)) s)"
  verdicts "$OUT/multiprocess-rest.log"
fi
gzip -f "$OUT"/*.log
