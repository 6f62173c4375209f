#!/usr/bin/env bash
# Run 5 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried: Send/Recv to a peer of the same
# host on a communicator across hosts now runs on the node's conccl communicator (nccl/hier_exec.h), the C API's and
# the drop-in's:
#   1. test_gpu_multiprocess CrossNode.* / CrossNodeFaults.* (the ring's intra-host pairs must say so in the log);
#   2. run_simulated_nodes.sh: 2x3 collectives (split, new_group), then the PyTorch workloads with p2p (batched rings
#      and a p2p all-to-all on the hierarchical world) and moe (all_to_all_single with uneven splits: grouped
#      send/recv) beside ddp, fsdp2, hsdp and tp_in_node, on 2x2 and 3x2; no node death (run 1).
# Output under $OUT: capi-cross-node.log.gz, simulated-nodes.tgz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:$NCCL_LIB:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
t0=$SECONDS
CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" timeout 200 gpu-stage/bin/test_gpu_multiprocess \
  --gtest_filter='Layouts/CrossNode.*:CrossNodeFaults.*' >"$OUT/capi-cross-node.log" 2>&1
say "C API across simulated hosts: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (     OK|FAILED ) \]|never ran|nothing was|not on the|not conccl|did not run on conccl' "$OUT/capi-cross-node.log" | head -30 | cut -c1-200 | tee -a "$s"
grep -a -E 'peers of this node' "$OUT/capi-cross-node.log" | sed 's/vm:[0-9]* //' | cut -c1-160 | sort | uniq -c | head -10 | tee -a "$s"
gzip -f "$OUT/capi-cross-node.log"
t0=$SECONDS
SHIM="$PWD/gpu-stage/lib/libconccl_nccl.so" LAYOUTS="2x3" WORKLOAD_LAYOUTS="2x2 3x2" \
  WORKLOAD_CASES="p2p,moe,ddp,fsdp2,hsdp,tp_in_node" DEATH_LAYOUTS="" LIMIT=150 \
  timeout 380 bash tests/nccl/run_simulated_nodes.sh >/dev/null 2>&1
say "drop-in on simulated nodes: rc=$? ($((SECONDS - t0)) s)"
grep -E '^(PASS|FAIL)' "$OUT/simulated-nodes/summary.txt" | cut -c1-400 | tee -a "$s"
grep -h -a 'peers of this node' "$OUT"/simulated-nodes/*.log | sed 's/^[^ ]* //' | cut -c1-160 | sort | uniq -c | head -6 | tee -a "$s"
tar czf "$OUT/simulated-nodes.tgz" -C "$OUT" simulated-nodes && rm -rf "$OUT/simulated-nodes"
