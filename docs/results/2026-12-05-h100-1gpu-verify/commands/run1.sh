#!/usr/bin/env bash
# Run 1 (one H100, 2026-12-05: prepared in session 45, run in session 46 on `nvidia-h100-x1`, the only kind that started): the verify phase; stage TARGETS="test_gpu_multiprocess conccl_mp_worker conccl
# conccl_nccl_shim test_gpu_vmm_piece_check test_gpu_capture_mode test_gpu_capture_ipc" JOBS=2 bash scripts/gpu-build.sh.
BUDGET_S=560 bash scripts/gpu.sh verify 2>&1 | tail -60
