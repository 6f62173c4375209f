#!/usr/bin/env bash
# Call 6: CallsDoNotWaitForLatePeers/0 (2 processes) twice on the stage (e4775c8), the suite's bounds: call 4's run of it
#   failed on the bound. Given as one command line; the same here.
source "$(dirname "$0")/common.sh"
for i in 1 2; do
  mp late2-$i 60 'Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0'
  awk '/^rank 0: host time per call/{f=1;next} f&&/^  /{print;next} f{exit}' "$OUT/late2-$i.log" |
    grep -aE "p50 above|pool memory|AllReduce (1|64|1024) MiB:" | sed -E 's/, max[^(]*\(9 calls:/ (/; s/; graph.*//' |
    cut -c1-150 | tee -a "$s"
  grep -a "p50 above" "$OUT/late2-$i.log" | head -5 | tee -a "$s"
done
pack
true
