#!/usr/bin/env bash
# Run 3 (one H200, 2026-12-05, session 43), stage TARGETS="test_gpu_multiprocess conccl_mp_worker conccl
# conccl_nccl_shim" at the commit in the summary's first line: retired VMM
# units served until the peers read past the carrying call, freed exports swept in the background, the staged
# AllReduce one shot up to 8 ranks at <= 1 MiB:
#   1. PyTorch's workloads through the drop-in, every case, 2 processes, default allocator and expandable segments
#      (exported): run 2's failures were memory_return (default) and graphs/compile/memory_return (expandable: "the
#      owner no longer exports it");
#   2. test_gpu_multiprocess: the reference scenario with 3 processes (the staged one shot), in the time left.
# Sized for the ~240 s of device time left (a machine's start counts: 90-180 s).
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python CASES=workloads NPS=2 ALLOCS=expandable NO_NCCL=1 BUDGET_S=85 timeout 95 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/torch" >"$OUT/torch.log" 2>&1
say "workloads, default and expandable (exported), 2 processes: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(FAIL|SKIP)|passed|memory_return" "$OUT/torch.log" | cut -c1-300 | tee -a "$s"
grep -rah "CONCCL WARN" "$OUT/torch" 2>/dev/null | sed 's/^[^]]*\] //' | cut -c1-200 | sort | uniq -c | head -8 | tee -a "$s"
if [ $SECONDS -lt 90 ]; then
  t0=$SECONDS
  CONCCL_TEST_WORKER_LIMIT_S=25 timeout 35 gpu-stage/bin/test_gpu_multiprocess --gtest_brief=1 \
    --gtest_filter='*EveryCollectiveMatchesTheReference/1' >"$OUT/mp.log" 2>&1
  say "test_gpu_multiprocess reference scenario, 3 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' "$OUT/mp.log" | head -6 | cut -c1-200 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" torch 2>/dev/null && rm -rf "$OUT/torch"
true
