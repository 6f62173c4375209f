#!/usr/bin/env bash
# The skew case through the drop-in only (conccl), expandable segments and the default allocator, 2 processes, under
#   CONCCL_DEBUG=TRACE: each call's host laps as a log line, to find the step where a round's first call leaves the
#   CPU. The log lines themselves cost host time: these runs' figures are not the bound's.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
torch_suite skew-trace 200 CASES=skew NPS=2 NO_NCCL=1 SKEW_ALLOCS="expandable default" BUDGET_S=170 CONCCL_DEBUG=TRACE
pack
true
