#!/usr/bin/env bash
# Does a smaller graph launch faster (~140 s)? Ranks/MultiProcess.CallsDoNotWaitForLatePeers/2 (4 processes) with
#   CONCCL_HOST_LAPS=1 (bound lifted) under three graph shapes, on the same host: the default (2 lanes above
#   CONCCL_SINGLE_STREAM_BYTES), CONCCL_LANES=1, and every program on the caller's stream (CONCCL_LANES=1,
#   CONCCL_SINGLE_STREAM_BYTES=1 TiB). Rank 0's median "graph launch" lap per call kind is the figure: the driver's
#   launch of the cached graph, 4-13 us on the H100 hosts of 2026-12-07 (docs/results/2026-12-07-h100-1gpu-skew-laps/).
source "$(dirname "$0")/../../results/2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
run_laps() {  # NAME, then VAR=value settings
  local name="$1"
  shift
  late4_laps "$name" "late 4 processes, laps, $*" "$@"
  grep -a "host laps of concclAllReduce\|host laps of concclAllGather\|host laps of concclReduceScatter" \
    "$OUT/$name.log" | grep -a "rank 0 " | grep -av "idle wait" | sed 's/^.*host laps of //' |
    sed -E 's/^([^,]*), ([0-9]+ call).*(graph launch [0-9]+ us[^,]*).*(total [0-9]+ us).*/\1: \3, \4/' | tee -a "$s"
}
run_laps default CONCCL_LANES=2
run_laps lanes1 CONCCL_LANES=1
run_laps single CONCCL_LANES=1 CONCCL_SINGLE_STREAM_BYTES=1099511627776
pack
true
