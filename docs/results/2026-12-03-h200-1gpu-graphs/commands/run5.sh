#!/usr/bin/env bash
# Run 5 (one H200): after the fix (the GPU watchdog keeps re-opening the flags after any failure until the rank's
# GPU work drains): the fault cases of tests/torch/run_all.sh with 2 processes (kill while waiting on the host /
# GPU, abort with each API, the bootstrap intruder), then kill_host with 4 processes.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O="${OUT:-/tmp/out}"; mkdir -p "$O"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
CASES='fault' BUDGET_S=200 NO_NCCL=1 ALLOCS= timeout -k 5 220 bash tests/torch/run_all.sh \
  gpu-stage/lib/libconccl_nccl.so "$O/torch" > "$O/run_all.log" 2>&1
echo "run_all rc=$?"; grep -aE "^(FAIL|PASS|SKIP)|passed" "$O/run_all.log" | cut -c1-330
cd "$O" && tar czf logs.tgz run_all.log torch 2>/dev/null && rm -rf torch run_all.log
