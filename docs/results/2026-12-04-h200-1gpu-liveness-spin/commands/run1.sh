#!/usr/bin/env bash
# Run 1 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried (scripts/gpu-build.sh):
#   1. a simulated node that dies, now also reported through the rendezvous root's liveness link
#      (src/nccl/liveness_link.h): tests/nccl/run_simulated_nodes.sh, node death on 2x2 and 3x2 (host and GPU waits),
#      and the 3x2 collectives (split and new_group) as a regression check of the rendezvous that now stays open;
#   2. the C API with peers 2 s late (test_gpu_multiprocess CallsDoNotWaitForLatePeers/0, 2 processes): host time
#      per call now that the route's spin is skipped for a peer two or more calls behind.
# Output under $OUT: simulated-nodes.tgz, capi-late.log.gz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
# (As run, the line below was missing: gpu-stage/bin/ is packed as bin.tgz, so step 2 found no binary, rc 127;
# run 2 repeats it.)
t0=$SECONDS
timeout 200 gpu-stage/bin/test_gpu_multiprocess --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' \
  >"$OUT/capi-late.log" 2>&1
say "C API late-skew (2 processes): rc=$? ($((SECONDS - t0)) s)"
grep -a -E 'p50|FAILED|OK \]' "$OUT/capi-late.log" | head -24 | cut -c1-260 | tee -a "$s"
gzip -f "$OUT/capi-late.log"
t0=$SECONDS
SHIM="$PWD/gpu-stage/lib/libconccl_nccl.so" LAYOUTS="3x2" WORKLOAD_LAYOUTS="" LIMIT=100 \
  bash tests/nccl/run_simulated_nodes.sh >/dev/null 2>&1
say "simulated nodes (3x2 collectives; node death 2x2 3x2): rc=$? ($((SECONDS - t0)) s)"
grep -E '^(PASS|FAIL)' "$OUT/simulated-nodes/summary.txt" | cut -c1-900 | tee -a "$s"
grep -h -a "liveness\|process ended without\|ncclRemoteError" "$OUT"/simulated-nodes/*.log 2>/dev/null | head -6 | cut -c1-300 | tee -a "$s"
tar czf "$OUT/simulated-nodes.tgz" -C "$OUT" simulated-nodes && rm -rf "$OUT/simulated-nodes"
