#!/usr/bin/env bash
# Run 8 (2026-12-05, session 48), stage 79e39b2 (consecutive copies on M that continue each other are one copy):
# the single-process GPU suites that run copy-engine programs (executor, graph cache, graphs, capture modes, every
# collective, chunked AllGather / ReduceScatter), the multiprocess reference checks and Send/Recv with 2 and 3
# processes, the late-call test (2 processes, bound 20 us) and the drop-in's skew case (2 processes, conccl only).
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
cd gpu-stage/bin || exit 1
export LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}"
for t in test_gpu_executor test_gpu_graph_cache test_gpu_graphs test_gpu_capture_mode test_gpu_collectives \
         test_gpu_chunked_all_gather test_gpu_chunked_reduce_scatter; do
  t0=$SECONDS
  timeout 120 ./$t --gtest_brief=1 >"$OUT/$t.log" 2>&1
  say "$t: rc=$? ($((SECONDS - t0)) s) $(grep -aE '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|SKIPPED \] [0-9]' "$OUT/$t.log" | tr '\n' ' ' | cut -c1-160)"
  grep -a "^\[  FAILED  \] [A-Z]" "$OUT/$t.log" | head -5 | tee -a "$s"
done
t0=$SECONDS
CONCCL_TEST_WORKER_LIMIT_S=60 timeout 200 ./test_gpu_multiprocess --gtest_brief=1 \
  --gtest_filter='*EveryCollectiveMatchesTheReference/0:*EveryCollectiveMatchesTheReference/1:*SendRecvAcrossProcesses/0:*SendRecvAcrossProcesses/1:*PairOwnedLateCallsMatchTheReference/0' >"$OUT/mp.log" 2>&1
say "multiprocess reference + Send/Recv: rc=$? ($((SECONDS - t0)) s) $(grep -aE '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' "$OUT/mp.log" | tr '\n' ' ')"
grep -a "^\[  FAILED  \] [A-Z]" "$OUT/mp.log" | head -5 | tee -a "$s"
t0=$SECONDS
CONCCL_HOST_LAPS=1 CONCCL_TEST_WORKER_LIMIT_S=60 timeout 90 ./test_gpu_multiprocess \
  --gtest_filter="Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0" >"$OUT/late0.log" 2>&1
say "late, 2 processes, bound 20 us: rc=$? ($((SECONDS - t0)) s)"
grep -a -A4 "host time per call" "$OUT/late0.log" | grep -a "rank 0\|AllReduce" | head -5 | cut -c1-120 | tee -a "$s"
cd ../..
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 BUDGET_S=150 CONCCL_HOST_LAPS=1 timeout 170 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
say "drop-in skew, CONCCL_HOST_LAPS=1: rc=$? ($((SECONDS - t0)) s)"
grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
grep -rah "host laps of concclSend" "$OUT/skew" | grep -a "rank 0 " | sed 's/^[^[]*//' | cut -c1-400 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/skew.tgz" -C "$OUT" skew 2>/dev/null && rm -rf "$OUT/skew"
true
