#!/usr/bin/env bash
# Run 1 (2026-12-06, session 51), stage named in summary.txt: cudaMallocAsync memory shared with the peers
# (BufferExport::kPool, CONCCL_SHAREABLE_POOL=1; src/exec/cuda/pool_export.h). In order: the driver probe
# (probe_pool_ids.py: buffer ids and ranges of pool allocations, pointer imports, an import freed while a newer one of
# the same address lives); SharedPoolMemoryMovesDirectlyAndDoesNotWaitForLatePeers with 2 processes (every collective,
# AllToAllv, Send/Recv right on such memory, peers' allocations imported, pool bursts with the peers 2 s late bounded
# at 20 us); the drop-in's skew case under PyTorch's cudaMallocAsync backend with CONCCL_SHAREABLE_POOL=1
# (2 processes, bound 20 us); run 3 of 2026-12-06-h100-1gpu-pool (graph memory, PyTorch's workloads under
# cudaMallocAsync, default pool); the shared-pool test with 4 processes if time is left.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
here="$(dirname "${BASH_SOURCE[0]}")"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
timeout 60 /opt/torch/.venv/bin/python "$here/probe_pool_ids.py" >"$OUT/probe.log" 2>&1
say "probe: rc=$? ($((SECONDS - t0)) s)"
cut -c1-400 "$OUT/probe.log" | tee -a "$s"
sp() {  # PARAM LIMIT
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=$(($2 - 10)) \
      timeout "$2" ./test_gpu_multiprocess \
      --gtest_filter="Ranks/MultiProcess.SharedPoolMemoryMovesDirectlyAndDoesNotWaitForLatePeers/$1" ) \
      >"$OUT/shared-pool$1.log" 2>&1
}
t0=$SECONDS
sp 0 110
say "shared pool, 2 processes: rc=$? ($((SECONDS - t0)) s)"
grep -a "pool memory\|imported by\|OK;\|FAILED\|wrong\|rror" "$OUT/shared-pool0.log" | head -14 | cut -c1-200 \
  | tee -a "$s"
t0=$SECONDS
CONCCL_SHAREABLE_POOL=1 PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 SKEW_ALLOCS=async \
  BUDGET_S=100 timeout 110 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
say "skew, drop-in, cudaMallocAsync with CONCCL_SHAREABLE_POOL=1 (bound 20 us): rc=$? ($((SECONDS - t0)) s)"
grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
grep -a "^FAIL\|^PASS" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
mkdir -p "$OUT/pool-run3"
t0=$SECONDS
OUT="$OUT/pool-run3" bash docs/results/2026-12-06-h100-1gpu-pool/commands/run3.sh >/dev/null 2>&1
say "run 3 of 2026-12-06-h100-1gpu-pool: rc=$? ($((SECONDS - t0)) s)"
tee -a "$s" < "$OUT/pool-run3/summary.txt"
if [ $SECONDS -lt 420 ]; then
  t0=$SECONDS
  sp 2 $((560 - SECONDS))
  say "shared pool, 4 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "pool memory\|imported by\|FAILED\|wrong\|rror" "$OUT/shared-pool2.log" | head -8 | cut -c1-200 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" skew 2>/dev/null && rm -rf "$OUT/skew"
true
