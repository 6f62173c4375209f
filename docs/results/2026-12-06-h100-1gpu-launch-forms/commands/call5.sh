#!/usr/bin/env bash
# Call 5: PyTorch through the drop-in (stage e4775c8) under its cudaMallocAsync backend, 2 processes: the workloads and
#   the skew case (plain NCCL beside). Given as one command line; the same here.
source "$(dirname "$0")/common.sh"
torch_suite async 300 CASES='skew|workloads' NPS=2 ALLOCS=async SKEW_ALLOCS=async BUDGET_S=290
pack
true
