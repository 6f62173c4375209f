#!/usr/bin/env bash
# Run 2 (2026-12-06, session 51), stage named in summary.txt: after run 1's crash on the shared pool with 2 processes
# (a pool import freed while a later allocation's import at the same address used it), with imports counted per
# address (IpcImportTable::dropPooledImport) and the pool export only under CONCCL_SHAREABLE_POOL=1.
#  1. the driver probe, with P6 (a later allocation's export at the same place, byte for byte) and P7 (the export's
#     cost by allocation size);
#  2. SharedPoolMemoryMovesDirectlyAndDoesNotWaitForLatePeers, 2 processes, with CONCCL_HOST_LAPS=1 (where rank 0's
#     host time goes: the laps' medians at destroy);
#  3. the same with 4 processes.
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
cut -c1-400 "$OUT/probe.log" | tee -a "$s"
shared=Ranks/MultiProcess.SharedPoolMemoryMovesDirectlyAndDoesNotWaitForLatePeers
t0=$SECONDS
CONCCL_HOST_LAPS=1 gt shared-pool2 110 "$shared/0"
say "2. shared pool, 2 processes, host laps: rc=$? ($((SECONDS - t0)) s)"
grep -a "pool memory\|imported by\|OK;\|FAILED\|wrong\|rror\|WARN" "$OUT/shared-pool2.log" | head -16 | cut -c1-200 \
  | tee -a "$s"
grep -a "host laps of concclAllReduce\|host laps of concclAllGather" "$OUT/shared-pool2.log" | head -8 | cut -c1-400 \
  | tee -a "$s"
t0=$SECONDS
gt shared-pool4 130 "$shared/2"
say "3. shared pool, 4 processes: rc=$? ($((SECONDS - t0)) s)"
grep -a "pool memory\|imported by\|FAILED\|wrong\|rror\|WARN" "$OUT/shared-pool4.log" | head -10 | cut -c1-200 \
  | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
true
