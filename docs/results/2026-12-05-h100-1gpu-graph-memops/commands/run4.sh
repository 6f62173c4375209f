#!/usr/bin/env bash
# Run 4-5 (2026-12-05, session 48): stage c7a487d plus temporary finer laps ("FINE ..." in process_clique_calls.cc and
# cuda_executor_launch.cc, not committed; run 5: the laps tally up to 48 marks, not 16): where the late call's host time outside the graph launch goes, 2 processes,
# CONCCL_HOST_LAPS=1; and the machine's clock source and whether perf is there.
set -u
OUT="${OUT:-/tmp/out}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
say "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource) perf: $(command -v perf || echo none) cpu: $(grep -m1 'model name' /proc/cpuinfo)"
cd gpu-stage/bin || exit 1
export LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}"
for np in 0 1; do
  t0=$SECONDS
  CONCCL_HOST_LAPS=1 CONCCL_TEST_MAX_HOST_US=1e6 CONCCL_TEST_WORKER_LIMIT_S=60 timeout 80 ./test_gpu_multiprocess \
    --gtest_filter="Ranks/MultiProcess.CallsDoNotWaitForLatePeers/$np" >"$OUT/late$np-fine.log" 2>&1
  say "late (param $np), CONCCL_HOST_LAPS=1: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A4 "host time per call" "$OUT/late$np-fine.log" | grep -a "rank 0\|AllReduce" | head -5 | cut -c1-120 | tee -a "$s"
  grep -a "host laps of concclAllReduce" "$OUT/late$np-fine.log" | grep -a "rank 0 " | sed 's/^[^[]*//' | cut -c1-1500 | tee -a "$s"
done
gzip -f "$OUT"/*.log 2>/dev/null
true
