#!/usr/bin/env bash
# The skew case beside plain NCCL under three allocators (skew.sh, limited by argument 1, default 290 s) on an H200
#   only; on any other card it says which card came and stops, since an H100 run of it would add one more slow host's
#   figures and nothing else. first.sh runs it at the skew case's own limit; alone, with a short limit, it is the last
#   start of a session whose device time is short (500-600 s; a start was refused with 407 s left).
if ! nvidia-smi -L | head -1 | grep -q H200; then
  echo "not an H200 ($(nvidia-smi -L | head -1 | cut -c1-40)): nothing run" | tee -a "${OUT:-/tmp/out}/summary.txt"
  exit 0
fi
exec bash "$(dirname "$0")/../../results/2026-12-06-h100-1gpu-whole/commands/skew.sh" "${1:-290}"
