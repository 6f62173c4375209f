#!/usr/bin/env bash
# Run 5 (2026-12-05, session 47): host laps without a log line per call (CONCCL_HOST_LAPS=1: each rank's median laps
# per call kind and size, logged at destroy): (1) the late-call test with 3 processes (CallsDoNotWaitForLatePeers/1,
# peers 2 s late, the default late route); (2) the drop-in's skew case (skew_host_time.py, 2 processes, a peer
# 2 s late, every call kind), conccl only. Stage with the laps "graph lookup", "graph launch", "done marker" and "return",
# laps on the Send/Recv path, and its schedule from the cache (no copy per call): first Send/Recv across processes
# checked (2-4 processes; p2p against every collective on two communicators, 3 processes).
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=60 timeout 150 \
    ./test_gpu_multiprocess --gtest_brief=1 \
    --gtest_filter='*SendRecvAcrossProcesses*:*CallsOnTwoCommunicatorsInDifferentOrdersFinish/1:*EveryCollectiveMatchesTheReference/0' ) \
  >"$OUT/p2p.log" 2>&1
say "Send/Recv checks: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^\[  (PASSED|FAILED) |FAILED|tests ran" "$OUT/p2p.log" | head -8 | cut -c1-200 | tee -a "$s"
t0=$SECONDS
( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_HOST_LAPS=1 CONCCL_TEST_MAX_HOST_US=1e6 \
    CONCCL_TEST_WORKER_LIMIT_S=60 timeout 100 ./test_gpu_multiprocess \
    --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/1' ) >"$OUT/late3-tally.log" 2>&1
say "late 3 processes, CONCCL_HOST_LAPS=1: rc=$? ($((SECONDS - t0)) s)"
grep -a -A4 "host time per call" "$OUT/late3-tally.log" | grep -a "host time\|AllReduce" | cut -c1-120 | tee -a "$s"
grep -a "host laps of concclAllReduce" "$OUT/late3-tally.log" | sed 's/^[^[]*//' | cut -c1-400 | tee -a "$s"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 BUDGET_S=150 CONCCL_HOST_LAPS=1 timeout 170 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
say "drop-in skew, CONCCL_HOST_LAPS=1: rc=$? ($((SECONDS - t0)) s)"
grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
grep -rah "host laps of" "$OUT/skew" | grep -a "rank 0 " | sed 's/^[^[]*//' | cut -c1-400 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/skew.tgz" -C "$OUT" skew 2>/dev/null && rm -rf "$OUT/skew"
true
