#!/usr/bin/env bash
# The rest of skew-laps.sh on the same host (~150 s): the cudaMallocAsync run its budget did not reach (laps tallied),
#   then the default allocator's skew case with plain NCCL beside (NCCL_HOSTID per process), no laps: this host's
#   drop-in own time against NCCL's in one run.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
torch_suite skew-laps-async 80 CASES=skew NPS=2 NO_NCCL=1 SKEW_ALLOCS=async BUDGET_S=75 CONCCL_HOST_LAPS=1
laps_summary "$OUT/skew-laps-async"
torch_suite skew-default-nccl 110 CASES=skew NPS=2 SKEW_ALLOCS=default BUDGET_S=100
pack
true
