#!/usr/bin/env bash
# Where a slower host's late-call time goes (~200 s): Ranks/MultiProcess.CallsDoNotWaitForLatePeers/2 (4 processes,
#   the one test that missed the 20 us bound on 2026-12-07, docs/results/2026-12-07-h100-1gpu-closer/) twice as the
#   suite runs it, then once with CONCCL_HOST_LAPS=1 (each call kind's median laps, rank 0; its bound lifted, the
#   tally costing a little host time). Set a slow op's laps beside a fast one's and beside the laps of the runs of
#   2026-12-06 (docs/results/2026-12-06-h100-1gpu-launch-forms/call4-bounce-nodes/summary.txt).
source "$(dirname "$0")/../../results/2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
for try in 1 2; do
  mp "late4-try$try" 100 'Ranks/MultiProcess.CallsDoNotWaitForLatePeers/2'
  grep -a -A10 "^rank 0: host time per call" "$OUT/late4-try$try.log" | head -11 | grep -a "p50" | cut -c1-90 |
    tee -a "$s"
done
late4_laps late4-laps "late 4 processes, CONCCL_HOST_LAPS=1"
grep -a "host laps of concclAllReduce\|host laps of concclAllGather\|host laps of concclReduceScatter" \
  "$OUT/late4-laps.log" | grep -a "rank 0 " | sed 's/^[^[]*//' | cut -c1-400 | tee -a "$s"
pack
true
