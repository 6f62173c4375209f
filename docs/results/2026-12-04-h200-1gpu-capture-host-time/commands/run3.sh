#!/usr/bin/env bash
# Run 3 (one H200, 2026-12-04, session 38), from the repository root with gpu-stage/ carried (TARGETS="test_gpu_capture_mode
# test_gpu_capture_ipc test_gpu_multiprocess conccl_mp_worker" scripts/gpu-build.sh), after run 2 showed the capture watch
# alone does not save the unstaged scenario's graph: a captured call now runs in relaxed capture mode
# (exec::RelaxedCaptureScope: its IPC mapping and scratch allocation beside the capture).
#   0. test_gpu_capture_ipc: what CUDA allows beside a global capture (mapping in the relaxed scope, unmapping from a
#      relaxed thread, a device-wide wait begun before the capture), with a helper process exporting buffers;
#   1. test_gpu_capture_mode (relaxed allocation beside a global capture; a device-wide wait breaks it whatever the
#      mode; the watch sees a call's capture until it ends);
#   2. the reference scenarios (staged and unstaged, 2-4 processes), up to five rounds;
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
timeout 60 gpu-stage/bin/test_gpu_capture_ipc >"$OUT/capture-ipc.log" 2>&1
say "test_gpu_capture_ipc: rc=$? ($((SECONDS - t0)) s)"; verdicts "$OUT/capture-ipc.log"
grep -a '^CaptureIpc:' "$OUT/capture-ipc.log" | tee -a "$s"
t0=$SECONDS
timeout 60 gpu-stage/bin/test_gpu_capture_mode >"$OUT/capture-mode.log" 2>&1
say "test_gpu_capture_mode: rc=$? ($((SECONDS - t0)) s)"; verdicts "$OUT/capture-mode.log"
for i in 1 2 3 4 5; do
  [ $SECONDS -lt 330 ] || { say "reference round $i skipped (budget)"; continue; }
  t0=$SECONDS
  CONCCL_TEST_WORKER_LIMIT_S=75 LD_PRELOAD="$BT" timeout 170 gpu-stage/bin/test_gpu_multiprocess \
    --gtest_filter='*EveryCollectiveMatchesTheReference*' >"$OUT/reference-$i.log" 2>&1
  say "reference scenarios, round $i: rc=$? ($((SECONDS - t0)) s)"; verdicts "$OUT/reference-$i.log"
done
gzip -f "$OUT"/*.log
