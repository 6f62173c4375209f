#!/usr/bin/env bash
# Run 7 (2026-12-05, session 47), stage 80b6ced: an unmatched Send/Recv's description made only for messages (checked
# by the size-mismatch test, whose error names the op) and the tally's own key left out of the laps: Send/Recv with
# 2 processes, the mismatch test, then the late-call test with 3 processes and CONCCL_HOST_LAPS=1.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
cd gpu-stage/bin || exit 1
export LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}"
t0=$SECONDS
CONCCL_TEST_WORKER_LIMIT_S=40 timeout 60 ./test_gpu_multiprocess --gtest_brief=1 \
  --gtest_filter='*SendRecvAcrossProcesses/0:*SendRecvSizeMismatchFailsBothSides' >"$OUT/p2p.log" 2>&1
say "Send/Recv checks: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^\[  (PASSED|FAILED) |FAILED|moves [0-9]+ bytes" "$OUT/p2p.log" | head -6 | cut -c1-250 | tee -a "$s"
t0=$SECONDS
CONCCL_HOST_LAPS=1 CONCCL_TEST_MAX_HOST_US=1e6 CONCCL_TEST_WORKER_LIMIT_S=60 timeout 80 ./test_gpu_multiprocess \
  --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/1' >"$OUT/late3-tally.log" 2>&1
say "late 3 processes, CONCCL_HOST_LAPS=1: rc=$? ($((SECONDS - t0)) s)"
grep -a -A4 "host time per call" "$OUT/late3-tally.log" | grep -a "host time\|AllReduce" | cut -c1-120 | tee -a "$s"
grep -a "host laps of concclAllReduce" "$OUT/late3-tally.log" | grep -a "rank 0 " | sed 's/^[^[]*//' | cut -c1-400 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
true
