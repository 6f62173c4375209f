#!/usr/bin/env bash
# Run 4 (2026-12-06, session 52), stage named in summary.txt (the copy kernel within smBudget, 8 CTAs): issue 24's
# host-time bound on every memory kind, in order while device time is left (steps stop starting after RUN_LIMIT_S,
# default 450 s):
#  1. CallsDoNotWaitForLatePeers, 2 processes (the 20 us bound; cudaMalloc and pool memory);
#  2. MemoryCudaIpcCannotShareWorksAtEverySize, 2 processes (every collective on pool and VMM memory, two streams);
#  3. the drop-in's skew case under PyTorch's cudaMallocAsync backend, conccl (bound 20 us) and plain NCCL
#     (NCCL_HOSTID per process) beside it;
#  4. the drop-in's workloads under cudaMallocAsync, 2 processes;
#  5. steps 1 and 2 with 4 processes, then step 1 with 3;
#  6. the skew case with the default allocator and expandable segments (conccl).
set -u
OUT="${OUT:-/tmp/out}"
LIMIT="${RUN_LIMIT_S:-450}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
left() { [ $SECONDS -lt "$LIMIT" ] || { say "stopped before: $1 (${SECONDS} s used)"; return 1; }; }
gt() {  # NAME LIMIT FILTER
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=$(($2 - 10)) \
      timeout "$2" ./test_gpu_multiprocess --gtest_filter="$3" ) >"$OUT/$1.log" 2>&1
}
late() {  # NP_INDEX
  local t0=$SECONDS
  gt late$1 100 "Ranks/MultiProcess.CallsDoNotWaitForLatePeers/$1"
  say "late calls, $(($1 + 2)) processes, bound 20 us: rc=$? ($((SECONDS - t0)) s)"
  grep -a "rank 0: host time" -A14 "$OUT/late$1.log" | grep -a "AllReduce\|pool\|bound\|FAILED" | head -10 \
    | cut -c1-150 | tee -a "$s"
}
kinds() {  # NP_INDEX
  local t0=$SECONDS
  gt kinds$1 100 "Ranks/MultiProcess.MemoryCudaIpcCannotShareWorksAtEverySize/$1"
  say "memory kinds, $(($1 + 2)) processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "every collective on memory\|FAILED\|wrong\|rror" "$OUT/kinds$1.log" | head -2 | cut -c1-300 | tee -a "$s"
}
skew() {  # NAME ALLOCS NO_NCCL BUDGET
  local t0=$SECONDS
  PY=/opt/torch/.venv/bin/python NO_NCCL=$3 CASES=skew NPS=2 SKEW_CALLS=3 SKEW_ALLOCS="$2" BUDGET_S=$4 \
    timeout $(($4 + 10)) bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/$1" >"$OUT/$1.log" 2>&1
  say "skew, drop-in, $2 (conccl bound 20 us; NO_NCCL=$3): rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 "^host time per call" "$OUT/$1/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
}
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
late 0
kinds 0
left "skew async" && skew skew-async async 0 120
if left "workloads"; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES='workloads.*@async$' NPS=2 ALLOCS=async BUDGET_S=100 timeout 110 \
    bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/async" >"$OUT/async.log" 2>&1
  say "drop-in workloads under cudaMallocAsync, 2 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "^FAIL\|passed,\|memory_return" "$OUT/async/summary.txt" 2>/dev/null | cut -c1-300 | tee -a "$s"
fi
left "late, 4 processes" && late 2
left "kinds, 4 processes" && kinds 2
left "late, 3 processes" && late 1
left "skew default/expandable" && skew skew-other "default expandable" 1 110
# Two files come back (the device tool returns only a few): summary.txt and logs.tgz (every log, and the PyTorch
# runs' folders).
( cd "$OUT" && tar czf logs.tgz --exclude=summary.txt --exclude=logs.tgz * 2>/dev/null && \
    find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name logs.tgz -exec rm -rf {} + )
true
