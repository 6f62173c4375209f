#!/usr/bin/env bash
# Run 7 (2026-12-05, session 48), stage with the watchdog change and the populated segment: the late-call test with
# 2, 3 and 4 processes with its own bound (CONCCL_TEST_MAX_HOST_US unset: p50 <= 20 us back to back) and
# CONCCL_HOST_LAPS=1; then the drop-in's skew case (skew_host_time.py, 2 processes, a peer 2 s late, every call kind,
# conccl only, SKEW_ASSERT_US default 20).
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
for np in 0 1 2; do
  t0=$SECONDS
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_HOST_LAPS=1 \
      CONCCL_TEST_WORKER_LIMIT_S=60 timeout 90 ./test_gpu_multiprocess \
      --gtest_filter="Ranks/MultiProcess.CallsDoNotWaitForLatePeers/$np" ) >"$OUT/late$np.log" 2>&1
  say "late, $((np + 2)) processes, bound 20 us: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A4 "host time per call" "$OUT/late$np.log" | grep -a "rank 0\|AllReduce" | head -5 | cut -c1-120 | tee -a "$s"
  grep -a "p50 above" "$OUT/late$np.log" | head -3 | tee -a "$s"
  grep -a "host laps of concclAllReduce 1 MiB" "$OUT/late$np.log" | grep -a "rank 0 " | sed 's/^[^[]*//' | cut -c1-400 | tee -a "$s"
done
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 BUDGET_S=150 CONCCL_HOST_LAPS=1 timeout 170 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
say "drop-in skew, CONCCL_HOST_LAPS=1: rc=$? ($((SECONDS - t0)) s)"
grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/skew.tgz" -C "$OUT" skew 2>/dev/null && rm -rf "$OUT/skew"
true
