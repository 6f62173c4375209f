#!/usr/bin/env bash
# Where the drop-in's own time goes in the skew case (~120 s): conccl only, 2 processes, peer 2 s late, three
#   allocators, CONCCL_HOST_LAPS=1 (each call kind's median laps per rank, logged when the communicator is destroyed;
#   the tally costs a little host time, so the bound is not the point here). Set each op's median record beside the
#   drop-in's own p50 of the same run: what the record does not cover is the drop-in's layer (ncclX to concclX).
source "$(dirname "$0")/../../results/2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
torch_suite skew-laps "${1:-150}" CASES=skew NPS=2 NO_NCCL=1 SKEW_ALLOCS="default expandable async" BUDGET_S=140 \
  CONCCL_HOST_LAPS=1
laps_summary "$OUT/skew-laps"
pack
true
