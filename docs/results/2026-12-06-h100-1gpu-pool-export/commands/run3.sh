#!/usr/bin/env bash
# Run 3 (2026-12-06, session 51), stage named in summary.txt: runs 1-2 showed that a pool allocation imported by
# pointer (cuMemPoolImportPointer) and kept across calls breaks once its owner frees it (frees of the import failed,
# copies crashed or failed), so the pointer export is gone; with CONCCL_SHAREABLE_POOL=1 the pieces of a shareable
# pool's memory are exported as VMM units instead (retained handles, block ids). The probe (P8: does the driver give a
# pool allocation's piece and retained handle?), then the shared-pool test with 2 and 4 processes.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
here="$(dirname "${BASH_SOURCE[0]}")"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
gt() {  # NAME LIMIT FILTER
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=$(($2 - 10)) \
      timeout "$2" ./test_gpu_multiprocess --gtest_filter="$3" ) >"$OUT/$1.log" 2>&1
}
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
timeout 60 /opt/torch/.venv/bin/python "$here/probe_pool_ids.py" >"$OUT/probe.log" 2>&1
say "1. probe: rc=$? ($((SECONDS - t0)) s)"
grep -a "P7\|P8" "$OUT/probe.log" | cut -c1-400 | tee -a "$s"
shared=Ranks/MultiProcess.SharedPoolMemoryMovesDirectlyAndDoesNotWaitForLatePeers
for np in 0 2; do
  t0=$SECONDS
  gt "shared-pool$np" 100 "$shared/$np"
  say "shared pool, $((np + 2)) processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "pool memory\|mapped here\|OK;\|FAILED\|wrong\|rror\|WARN" "$OUT/shared-pool$np.log" | head -14 \
    | cut -c1-200 | tee -a "$s"
done
gzip -f "$OUT"/*.log 2>/dev/null
true
