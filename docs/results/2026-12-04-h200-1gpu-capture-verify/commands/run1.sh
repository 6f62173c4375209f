#!/usr/bin/env bash
# Run 1 (one H200, 2026-12-04, session 39), stage TARGETS="test_gpu_capture_mode test_gpu_capture_ipc
# test_gpu_multiprocess conccl_mp_worker conccl conccl_nccl_shim": the capture phase (docs/dev/next-steps.md item 0):
# the capture probes (incl. case 3b), the unstaged reference scenario in rounds until one fails, the graph-replay
# kill, PyTorch's graph workloads through the drop-in.
set -u
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
BUDGET_S=560 CAPTURE_ROUNDS=6 PACK=logs bash scripts/gpu.sh capture
