#!/usr/bin/env bash
# Run 3 (one H200): the whole PyTorch suite through the drop-in (tests/torch/run_all.sh: workloads, ordering,
# pipelining, stream waits, skew, fault cases, expandable segments; 2 and 4 processes; NO_NCCL=1), then plain NCCL on
# the standalone isend/irecv ring and host time under skew (the references), then the split-from-threads shim test.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
O="${OUT:-/tmp/out}"; mkdir -p "$O"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
PY=/opt/torch/.venv/bin/python
BUDGET_S=390 NO_NCCL=1 ALLOCS=expandable timeout -k 5 420 bash tests/torch/run_all.sh \
  gpu-stage/lib/libconccl_nccl.so "$O/torch" > "$O/run_all.log" 2>&1
echo "run_all rc=$?"; grep -aE "^(FAIL|PASS|SKIP)|passed|^  [a-z_]+ .* p50" "$O/run_all.log" | cut -c1-230
NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 timeout -k 5 45 "$PY" -m torch.distributed.run --standalone \
  --nproc-per-node 2 tests/torch/ordering.py --sim-hosts --expect-path NCCL --cases ring --timeout-s 30 \
  > "$O/nccl-ring.log" 2>&1
echo "nccl ring rc=$? (124 = still running after 45 s)"; grep -aE 'CASE|RESULT' "$O/nccl-ring.log" | cut -c1-200
CONCCL_NCCL_SHIM_PATH="$PWD/gpu-stage/lib/libconccl_nccl.so" CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" \
  timeout -k 5 60 gpu-stage/bin/test_gpu_nccl_shim --gtest_brief=1 --gtest_filter='NcclShimGpu.Split*' \
  > "$O/shim-split.log" 2>&1
echo "shim split rc=$?"; grep -aE 'PASSED|FAILED' "$O/shim-split.log"
cd "$O" && tar czf logs.tgz run_all.log nccl-ring.log shim-split.log torch 2>/dev/null && \
  rm -rf torch run_all.log nccl-ring.log shim-split.log
