#!/usr/bin/env bash
# Run 1 (2026-12-05, session 49), stage 998f2c6: issue 24's host-time bound on an H200, no host laps. The late-call
# test (C API, peers 2 s late) with 2, 3 and 4 processes, its 20 us bound asserted; the drop-in's skew case
# (2 processes, SKEW_ASSERT_US default 20) with the default allocator, expandable segments and cudaMallocAsync. The
# same commands as run 1 of 2026-12-05-h100-1gpu-bound, less what that run showed right (faults, ordering, VMM) and
# plain NCCL's reference, to fit the device time left (RUN_SKEW_ALLOCS="default expandable" leaves cudaMallocAsync out).
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
for np in 0 1 2; do
  t0=$SECONDS
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=60 timeout 70 \
      ./test_gpu_multiprocess --gtest_filter="Ranks/MultiProcess.CallsDoNotWaitForLatePeers/$np" ) >"$OUT/late$np.log" 2>&1
  say "late, $((np + 2)) processes, bound 20 us: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A5 "host time per call" "$OUT/late$np.log" | grep -a "AllReduce" | head -4 | cut -c1-130 | tee -a "$s"
done
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 SKEW_ALLOCS="${RUN_SKEW_ALLOCS:-default expandable async}" \
  BUDGET_S=230 timeout 250 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
say "skew, drop-in, default allocator, expandable segments, cudaMallocAsync (bound 20 us): rc=$? ($((SECONDS - t0)) s)"
grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
grep -a "^FAIL\|^PASS" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" skew 2>/dev/null && rm -rf "$OUT/skew"
true
