#!/usr/bin/env bash
# Run 7 (one H200, 2026-12-04), from the repository root with gpu-stage/ carried (TARGETS="test_gpu_multiprocess
# conccl_mp_worker" scripts/gpu-build.sh: the stage holds those two, unpacked): the rest of test_gpu_multiprocess as a
# regression check of the API's new dispatch (concclCommInitRank, the groups, every collective entry point), all but
# the host-time-under-skew tests (their 20 us bound is issue 24's open item; they fail as they should).
# Output under $OUT: multiprocess.log.gz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
t0=$SECONDS
timeout 330 gpu-stage/bin/test_gpu_multiprocess \
  --gtest_filter='-*CallsDoNotWaitForLatePeers*:*DeferredCallsDoNotWaitForLatePeers*:*CrossNode*' \
  >"$OUT/multiprocess.log" 2>&1
say "test_gpu_multiprocess (all but the skew bound and CrossNode): rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' "$OUT/multiprocess.log" | head -20 | cut -c1-200 | tee -a "$s"
gzip -f "$OUT/multiprocess.log"
