#!/usr/bin/env bash
# Run 1 (2026-12-06, session 50), stage dc54930: issue 24's host-time bound and cudaMallocAsync pool memory. The
# late-call test (C API, peers 2 s late; with pool bursts: each call's buffer allocated right before it and freed right
# after it returns, results checked, the 1 MiB AllReduce held to 20 us and the larger pool calls reported) with 2, 3, 4
# processes; pool and VMM memory's correctness at 16 / 64 MiB (2 processes); the drop-in's skew case (2 processes,
# 20 us bound) under cudaMallocAsync and the default allocator; the drop-in's workloads, ordering and pipelining under
# cudaMallocAsync (2 processes). First, probe_shareable_pool.py (its docstring says what it asks). RUN_NPS (the late
# test's process counts less 2, default "0 1 2"), RUN_KINDS=0 (skip the memory-kinds test) and RUN_LIMIT_S (default
# 570: when the last step stops) fit it to the device time left.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
start=$SECONDS
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
timeout 60 /opt/torch/.venv/bin/python docs/results/2026-12-06-h100-1gpu-pool/commands/probe_shareable_pool.py \
  >"$OUT/probe.log" 2>&1
say "probe: a shareable pool under PyTorch's cudaMallocAsync, mapped by a peer process: rc=$? ($((SECONDS - t0)) s)"
grep -a "^Q\|^   \|status\|Error\|error" "$OUT/probe.log" | head -20 | cut -c1-200 | tee -a "$s"
gt() {  # NAME LIMIT FILTER
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=$(($2 - 10)) \
      timeout "$2" ./test_gpu_multiprocess --gtest_filter="$3" ) >"$OUT/$1.log" 2>&1
}
for np in ${RUN_NPS:-0 1 2}; do
  t0=$SECONDS
  gt late$np 100 "Ranks/MultiProcess.CallsDoNotWaitForLatePeers/$np"
  say "late, $((np + 2)) processes, bound 20 us: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 "rank 0: host time per call" "$OUT/late$np.log" | grep -a "AllReduce\|pool memory" | cut -c1-150 | tee -a "$s"
  grep -a "exceeded\|wrong\|is .*, want" "$OUT/late$np.log" | head -3 | cut -c1-200 | tee -a "$s"
done
if [ "${RUN_KINDS:-1}" = 1 ]; then
  t0=$SECONDS
  gt kinds 110 "Ranks/MultiProcess.MemoryCudaIpcCannotShareWorksAtEverySize/0"
  say "memory kinds (VMM, pools), 2 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "every collective on memory" "$OUT/kinds.log" | head -2 | cut -c1-200 | tee -a "$s"
fi
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 SKEW_ALLOCS="async default" BUDGET_S=150 \
  timeout 165 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
say "skew, drop-in, cudaMallocAsync and default allocator (bound 20 us): rc=$? ($((SECONDS - t0)) s)"
grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
grep -a "^FAIL\|^PASS" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
left=$((${RUN_LIMIT_S:-570} - (SECONDS - start)))
if [ "$left" -gt 60 ]; then
  t0=$SECONDS
  PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES='@async$' NPS=2 ALLOCS=async \
    ALLOC_SCRIPTS="workloads ordering pipeline" BUDGET_S=$((left - 10)) timeout "$left" \
    bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/async" >"$OUT/async.log" 2>&1
  say "drop-in under cudaMallocAsync, 2 processes: rc=$? ($((SECONDS - t0)) s)"
  grep -a "^FAIL\|^SKIP\|passed," "$OUT/async/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
fi
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" skew async 2>/dev/null && rm -rf "$OUT/skew" "$OUT/async"
true
