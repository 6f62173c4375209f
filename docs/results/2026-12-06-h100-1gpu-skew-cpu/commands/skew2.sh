#!/usr/bin/env bash
# Call 2: the skew case again through the drop-in only (conccl), default allocator and expandable segments, 2 processes,
#   on the same machine right after call 1, to see whether call 1's two misses of the 20 us bound repeat.
source "$(dirname "$0")/../../2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
torch_suite skew2 175 CASES=skew NPS=2 NO_NCCL=1 SKEW_ALLOCS="default expandable" BUDGET_S=160
pack
true
