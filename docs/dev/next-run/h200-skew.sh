#!/usr/bin/env bash
# The last start of a session whose device time is short (500-600 s; a start was refused with 407 s left): the skew
#   case beside plain NCCL under three allocators (skew.sh's run, budgeted to fit: argument 1, default 290 s) on an H200
#   only; on any other card it says which card came and stops, since an H100 run of it would add one more slow host's
#   figures and nothing else.
source "$(dirname "$0")/../../results/2026-12-06-h100-1gpu-pool-launch/commands/common.sh"
lim="${1:-290}"
if ! nvidia-smi -L | head -1 | grep -q H200; then
  say "not an H200: nothing run"
  exit 0
fi
torch_suite skew "$lim" CASES=skew NPS=2 SKEW_ALLOCS="async default expandable" BUDGET_S=$((lim - 15))
pack
true
