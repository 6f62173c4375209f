#!/usr/bin/env bash
# Call 5 (2026-12-06, session 54): the bootstrap intruder case alone (tests/torch/run_all.sh CASES=intruder, 2 and 4
#   processes), four times, after call 3's 4-process case was called inconclusive. Run as one command line:
source "$(dirname "$0")/common.sh"
for i in 1 2 3 4; do torch_suite "intruder$i" 120 NO_NCCL=1 CASES=intruder NPS="2 4" BUDGET_S=110; done
pack
true
