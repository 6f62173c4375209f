#!/usr/bin/env bash
# Run 2 (2026-12-05, session 48), stage c7a487d: is the late call's larger "graph launch" lap with 3 processes the
# sharing of one GPU? The probe's one-shot graph (3-rank sync pattern + a kernel node), 1 process, then 3 processes at
# once; then the late-call test with 2 processes and CONCCL_HOST_LAPS=1 beside run 1's 3.
set -u
OUT="${OUT:-/tmp/out}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
say "--- 1 process"
timeout 60 ./gpu-stage/memop_probe only 2>&1 | tee -a "$s"
say "--- 3 processes at once"
for i in 0 1 2; do timeout 90 ./gpu-stage/memop_probe only > "$OUT/probe3-$i.txt" 2>&1 & done; wait
for i in 0 1 2; do sed "s/^/p$i /" "$OUT/probe3-$i.txt" | tee -a "$s"; done
cd gpu-stage/bin || exit 1
export LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}"
t0=$SECONDS
CONCCL_HOST_LAPS=1 CONCCL_TEST_MAX_HOST_US=1e6 CONCCL_TEST_WORKER_LIMIT_S=60 timeout 80 ./test_gpu_multiprocess \
  --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' >"$OUT/late2-tally.log" 2>&1
say "late 2 processes, CONCCL_HOST_LAPS=1: rc=$? ($((SECONDS - t0)) s)"
grep -a -A4 "host time per call" "$OUT/late2-tally.log" | grep -a "host time\|AllReduce" | cut -c1-120 | tee -a "$s"
grep -a "host laps of concclAllReduce" "$OUT/late2-tally.log" | grep -a "rank 0 " | sed 's/^[^[]*//' | cut -c1-400 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
true
