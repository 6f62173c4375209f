#!/usr/bin/env bash
# Run 3 (one H200, 2026-12-05, session 43), stage TARGETS="test_gpu_multiprocess conccl_mp_worker conccl
# conccl_nccl_shim" at the commit in the summary's first line: retired VMM
# units served until the peers read past the carrying call, freed exports swept in the background, the staged
# AllReduce one shot up to 8 ranks at <= 1 MiB:
#   1. PyTorch's workloads through the drop-in (workloads.py, every case, as run_all.sh runs it), 2 processes,
#      expandable segments (exported) first, then the default allocator: run 2's failures were graphs/compile/
#      memory_return (expandable: "the owner no longer exports it") and memory_return (default);
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
# workloads.py as tests/torch/run_all.sh runs it (set_env), expandable segments first (the VMM fix), then the default
# allocator (memory_return).
PY=/opt/torch/.venv/bin/python
NCCL_LIB="$($PY -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))')"
for alloc in expandable default; do
  t0=$SECONDS
  extra=()
  envs=(env -u PYTORCH_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF LD_PRELOAD="$PWD/gpu-stage/lib/libconccl_nccl.so"
        CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" LD_LIBRARY_PATH="$NCCL_LIB:$LD_LIBRARY_PATH")
  if [ $alloc = expandable ]; then envs+=(PYTORCH_ALLOC_CONF=expandable_segments:True); extra=(--expect-expandable); fi
  timeout -k 5 60 "${envs[@]}" $PY -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/workloads.py \
    --expect-path conccl "${extra[@]}" >"$OUT/workloads-$alloc.log" 2>&1
  say "workloads, 2 processes, $alloc: rc=$? ($((SECONDS - t0)) s)"
  grep -a -o 'CASE [A-Za-z0-9_]* \(PASS\|FAIL\) .*' "$OUT/workloads-$alloc.log" | grep -a -E "FAIL|memory_return" |
    cut -c1-300 | tee -a "$s"
  say "  $(grep -a -c 'CASE [A-Za-z0-9_]* PASS' "$OUT/workloads-$alloc.log") cases passed"
  grep -a "CONCCL WARN" "$OUT/workloads-$alloc.log" | sed 's/^[^]]*\] //' | cut -c1-200 | sort | uniq -c | head -4 |
    tee -a "$s"
done
if [ $SECONDS -lt 90 ]; then
  t0=$SECONDS
  CONCCL_TEST_WORKER_LIMIT_S=25 timeout 35 gpu-stage/bin/test_gpu_multiprocess --gtest_brief=1 \
    --gtest_filter='*EveryCollectiveMatchesTheReference/1' >"$OUT/mp.log" 2>&1
  say "test_gpu_multiprocess reference scenario, 3 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' "$OUT/mp.log" | head -6 | cut -c1-200 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
true
