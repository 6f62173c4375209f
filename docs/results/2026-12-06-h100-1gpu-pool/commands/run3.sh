#!/usr/bin/env bash
# Run 3 (2026-12-06, session 50), stage 0e60584 (the graph memory lookup through the driver): buffers allocated inside a CUDA graph capture (a graph's memory, what
# PyTorch's cudaMallocAsync backend hands out under torch.cuda.graph), refused in run 1 ("recvbuff is a host pointer").
# EveryCollectiveMatchesTheReference (now with graphs whose buffers are allocated in the capture, 16 KiB and 12 MiB a
# rank) with 2 processes, and its unstaged variant; then the drop-in's workloads under cudaMallocAsync (2 processes).
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
gt() {  # NAME LIMIT FILTER
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=$(($2 - 10)) \
      timeout "$2" ./test_gpu_multiprocess --gtest_filter="$3" ) >"$OUT/$1.log" 2>&1
}
for t in EveryCollectiveMatchesTheReference EveryCollectiveMatchesTheReferenceUnstaged; do
  t0=$SECONDS
  gt "$t" 80 "Ranks/MultiProcess.$t/0"
  say "$t, 2 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "graph memory\|collective cases\|FAILED\|wrong" "$OUT/$t.log" | head -4 | cut -c1-200 | tee -a "$s"
done
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES='workloads.*@async$' NPS=2 ALLOCS=async BUDGET_S=90 timeout 100 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/async" >"$OUT/async.log" 2>&1
say "drop-in workloads under cudaMallocAsync, 2 processes: rc=$? ($((SECONDS - t0)) s)"
grep -a "^FAIL\|^SKIP\|passed," "$OUT/async/summary.txt" 2>/dev/null | cut -c1-240 | tee -a "$s"
grep -a "workloads/graphs" "$OUT/async/summary.txt" 2>/dev/null | cut -c1-240 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" async 2>/dev/null && rm -rf "$OUT/async"
true
