#!/usr/bin/env bash
# Session 5, call 4 (one H200): the TMA fan-in-2 reduction probe beside the library's reduction kernel.
set -uo pipefail
source scripts/gpu-env.sh
mkdir -p $OUT
timeout 300 gpu-stage/bin/conccl-kernel-bench --no-latency --tma-reduce-probe --runs 5 > $OUT/kbench.txt 2>&1; echo "rc=$?"
grep -v "^#json" $OUT/kbench.txt | grep -E "tma|ce-copy|check|fan|^ *2 " | head -80
