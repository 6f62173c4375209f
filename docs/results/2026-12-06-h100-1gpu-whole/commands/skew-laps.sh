#!/usr/bin/env bash
# The skew case through the drop-in only (conccl), expandable segments and the default allocator, 2 processes, with
#   CONCCL_HOST_LAPS=1: each call kind's median host laps, tallied apart for calls after an idle wait (a round's
#   first), logged when the communicator is destroyed; no log line per call.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
torch_suite skew-laps 200 CASES=skew NPS=2 NO_NCCL=1 SKEW_ALLOCS="expandable default" BUDGET_S=170 CONCCL_HOST_LAPS=1
pack
true
