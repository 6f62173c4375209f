#!/usr/bin/env bash
# Run 3 (one H200): the whole PyTorch suite (tests/torch/run_all.sh: workloads, ordering, pipelining, skew, fault
# cases, expandable segments; 2 and 4 processes) with the defaults (late calls staged, no deferral), then the C API's
# host time with late peers (CallsDoNotWaitForLatePeers, 2 processes) with CONCCL_RENDEZVOUS_SPIN_US=0 (how much of
# it is the route spin).
set -u
O="${OUT:-/tmp/out}"; mkdir -p "$O"
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
BUDGET_S=430 NO_NCCL=1 timeout -k 5 470 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$O/torch" \
  > "$O/run_all.log" 2>&1
echo "run_all rc=$?"; grep -E "^(FAIL|PASS|SKIP)|passed" "$O/run_all.log" | cut -c1-230
CONCCL_RENDEZVOUS_SPIN_US=0 timeout -k 5 100 gpu-stage/bin/test_gpu_multiprocess --gtest_brief=1 \
  --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' > "$O/late-spin0.log" 2>&1
echo "late-spin0 rc=$?"; grep -E "p50|FAILED|PASSED" "$O/late-spin0.log" | sort -u | cut -c1-200
cd "$O" && tar czf logs.tgz run_all.log late-spin0.log torch 2>/dev/null && rm -rf torch run_all.log late-spin0.log
