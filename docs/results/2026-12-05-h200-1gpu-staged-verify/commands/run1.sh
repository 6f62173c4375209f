#!/usr/bin/env bash
# Run 1 (one H200, 2026-12-05, session 43), stage TARGETS="test_gpu_multiprocess conccl_mp_worker conccl
# conccl_nccl_shim test_gpu_capture_ipc test_gpu_capture_mode conccl-bench" at 56d7654:
#   test_gpu_multiprocess whole (2-4 processes sharing the GPU): the staged AllReduce's new shapes (one shot with two
#   ranks, one handshake per pair with more), the import table's bounded waits, the late-skew scenario's two bounds,
#   VMM export, kill/abort cases, CrossNode last (cut first if time runs out).
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
BT="$PWD/gpu-stage/lib/libbt_on_signal.so"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
CONCCL_TEST_WORKER_LIMIT_S=60 LD_PRELOAD="$BT" timeout 570 gpu-stage/bin/test_gpu_multiprocess \
  >"$OUT/mp.log" 2>&1
say "test_gpu_multiprocess whole: rc=$? ($((SECONDS - t0)) s)"
grep -a -E '^\[  FAILED  \]|^\[  PASSED  \]|tests ran' "$OUT/mp.log" | sort -u | head -20 | cut -c1-200 | tee -a "$s"
say "tests finished: $(grep -a -c -E '^\[       OK \]' "$OUT/mp.log") OK, $(grep -a -c -E '^\[  FAILED  \] .*ms\)' "$OUT/mp.log") failed; last started: $(grep -a '^\[ RUN' "$OUT/mp.log" | tail -1)"
grep -a -E "FAILED:|staged instead|Failure|error:" "$OUT/mp.log" | grep -av "^\[" | sort | uniq -c | head -12 | cut -c1-300 |
  tee -a "$s"
grep -a -A3 "rank 0: host time per call" "$OUT/mp.log" | head -24 | cut -c1-250 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
true
