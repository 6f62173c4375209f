#!/usr/bin/env bash
# run 6 (stage ec6029a + the grouped ring: the shared early-launch check core/early_launch.h, the drop-in's own host
# time per call), most decisive first, as far as the session's remaining device time reaches:
#   PyTorch training workloads on 2 x 2 simulated nodes (DDP, FSDP2, HSDP, TP inside each node: workloads.py
#   --sim-nodes 2), tests/torch/skew_host_time.py through the drop-in (the Python call's time and the drop-in's own,
#   concclNcclShimTakeCallNs; peer 1 s late), test_gpu_thread_staged (LocalClique's early launches), ordering.py's
#   grouped ring, test_gpu_multiprocess (ProcessClique). Output: $OUT/*.log, skew.jsonl, summary.txt.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
root="$PWD"
s="$OUT/summary.txt"
PY=/opt/torch/.venv/bin/python
NL=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
shim=(env LD_PRELOAD="$root/gpu-stage/lib/libconccl_nccl.so" CONCCL_NCCL_REAL_LIB="$NL/libnccl.so.2")
step() {  # step NAME LIMIT_S CMD...
  local name="$1" limit="$2"; shift 2
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc ($((SECONDS - t0)) s): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |^CASE |^RESULT' "$OUT/$name.log" | tr '\n' ' ' | cut -c1-400)" | tee -a "$s"
  grep -E '^\[  FAILED  \] [A-Za-z]|^FAIL ' "$OUT/$name.log" | head -10 | cut -c1-300 | tee -a "$s"
}
OUT="$OUT/nodes" LIMIT=100 LAYOUTS= WORKLOAD_LAYOUTS=2x2 bash tests/nccl/run_simulated_nodes.sh >/dev/null 2>&1
grep -E '^(PASS|FAIL)' "$OUT/nodes/simulated-nodes/summary.txt" | cut -c1-400 | tee -a "$s"
mv "$OUT/nodes/simulated-nodes/2x2-workloads.log" "$OUT/nodes-2x2-workloads.log" 2>/dev/null; rm -rf "$OUT/nodes"
step skew 80 "${shim[@]}" "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/skew_host_time.py \
  --calls 4 --sleep-s 1 --out "$OUT/skew.jsonl" --assert-max-us 20
grep -E '^\|' "$OUT/skew.log" | tee -a "$s"
step thread_staged 45 gpu-stage/bin/test_gpu_thread_staged --gtest_brief=1
step ring_grouped 40 "${shim[@]}" CONCCL_TIMEOUT_MS=5000 "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 \
  tests/torch/ordering.py --cases ring_grouped,send_first_all_reduce
cd gpu-stage/bin || exit 1
step multiprocess 150 ./test_gpu_multiprocess --gtest_brief=1 \
  --gtest_filter='*Symmetric*:*Staged*:*Late*:*AllToAllv*:*SendRecv*:*:-*Kill*'
