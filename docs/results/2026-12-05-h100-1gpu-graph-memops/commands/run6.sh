#!/usr/bin/env bash
# Run 6 (2026-12-05, session 48), stage of the watchdog change (a napping watchdog is no longer woken by each call):
# the late-call test with 2 and 3 processes and CONCCL_HOST_LAPS=1, then every test that relies on the watchdog
# (mismatches, dead / hung / stalled peers, Send/Recv, calls on two communicators in different orders, deferred calls).
set -u
OUT="${OUT:-/tmp/out}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
cd gpu-stage/bin || exit 1
export LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}"
for np in 0 1; do
  t0=$SECONDS
  CONCCL_HOST_LAPS=1 CONCCL_TEST_MAX_HOST_US=1e6 CONCCL_TEST_WORKER_LIMIT_S=60 timeout 80 ./test_gpu_multiprocess \
    --gtest_filter="Ranks/MultiProcess.CallsDoNotWaitForLatePeers/$np" >"$OUT/late$np.log" 2>&1
  say "late (param $np: $((np + 2)) processes), CONCCL_HOST_LAPS=1: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A4 "host time per call" "$OUT/late$np.log" | grep -a "rank 0\|AllReduce" | head -5 | cut -c1-120 | tee -a "$s"
  grep -a "host laps of concclAllReduce" "$OUT/late$np.log" | grep -a "rank 0 " | sed 's/^[^[]*//' | cut -c1-700 | tee -a "$s"
done
t0=$SECONDS
CONCCL_TEST_WORKER_LIMIT_S=60 timeout 330 ./test_gpu_multiprocess --gtest_brief=1 --gtest_filter='MultiProcessErrors.*:MultiProcessSymmetric.*:MultiProcessStaged.*:MultiProcessDeferred.*:*SendRecvAcrossProcesses/0:*SendRecvAcrossProcesses/1:*CallsOnTwoCommunicatorsInDifferentOrdersFinish/0:*CallsOnTwoCommunicatorsInDifferentOrdersFinish/1' >"$OUT/watchdog.log" 2>&1
say "watchdog-reliant tests: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran" "$OUT/watchdog.log" | head -20 | cut -c1-200 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
true
