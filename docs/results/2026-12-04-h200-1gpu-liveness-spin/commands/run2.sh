#!/usr/bin/env bash
# Run 2 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried (scripts/gpu-build.sh):
#   1. the C API with peers 2 s late (test_gpu_multiprocess CallsDoNotWaitForLatePeers/0, 2 processes), host time
#      per call with the route's spin skipped for a peer two or more calls behind (run 1 found no binary);
#   2. the rest of test_gpu_multiprocess (every scenario with 2-4 processes; not run whole since late calls are
#      staged at call time);
#   3. the drop-in: tests/torch/skew_host_time.py through run_all.sh (2 processes, rank 1 2 s late, 5 calls per op).
# Output under $OUT: capi-late.log.gz, multiprocess.log.gz, dropin-skew.tgz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
t0=$SECONDS
timeout 200 gpu-stage/bin/test_gpu_multiprocess --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' \
  >"$OUT/capi-late.log" 2>&1
say "C API late-skew (2 processes): rc=$? ($((SECONDS - t0)) s)"
grep -a -E 'p50|FAILED|OK \]' "$OUT/capi-late.log" | head -24 | cut -c1-260 | tee -a "$s"
gzip -f "$OUT/capi-late.log"
t0=$SECONDS
timeout 330 gpu-stage/bin/test_gpu_multiprocess --gtest_filter='-*CallsDoNotWaitForLatePeers*' \
  >"$OUT/multiprocess.log" 2>&1
say "test_gpu_multiprocess without late-skew: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (PASSED|FAILED) |^\[==========\]|tests? ran|FAILED  \]' "$OUT/multiprocess.log" | head -30 | tee -a "$s"
gzip -f "$OUT/multiprocess.log"
left=$((560 - SECONDS))
if [ "$left" -gt 100 ]; then
  t0=$SECONDS
  CASES=skew NO_NCCL=1 SKEW_CALLS=5 BUDGET_S=$((left - 30)) \
    bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so /tmp/rs >/tmp/rs.txt 2>&1
  say "drop-in skew: rc=$? ($((SECONDS - t0)) s)"
  grep -a -E '^\||p50|PASS|FAIL' /tmp/rs.txt | head -30 | cut -c1-220 | tee -a "$s"
  cp /tmp/rs.txt /tmp/rs/ 2>/dev/null; tar czf "$OUT/dropin-skew.tgz" -C /tmp rs
else
  say "drop-in skew: not run (time)"
fi
