#!/usr/bin/env bash
# Run 1 (2026-12-05, session 49; nvidia-h200 asked for four times, none came; ran on nvidia-h100-x1), stage 998f2c6:
# issue 24's host-time bound, no host laps (the bound is the library's time, not a tracer's). The late-call test (C API, peers 2 s late) with 2, 3 and 4 processes, its 20 us
# bound asserted; the drop-in's skew case (2 processes, SKEW_ASSERT_US default 20) and plain NCCL's (simulated hosts,
# reported), default allocator; the drop-in's again with expandable segments and with cudaMallocAsync; then the
# PyTorch cases that lean on the watchdog and the call order (faults, ordering, stream waits, pipelining beside DDP;
# 2 processes); last, VMM memory moved directly with pieces replaced between rounds (the per-piece check by block id).
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
PY=/opt/torch/.venv/bin/python CASES=skew NPS=2 SKEW_CALLS=3 BUDGET_S=200 timeout 220 \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew" >"$OUT/skew.log" 2>&1
say "skew, drop-in (bound 20 us) and plain NCCL: rc=$? ($((SECONDS - t0)) s)"
grep -a -A12 "^host time per call" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
grep -a "^FAIL\|^PASS" "$OUT/skew/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=skew NPS=2 SKEW_CALLS=3 SKEW_ALLOCS="expandable async" BUDGET_S=170 \
  timeout 190 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/skew-alloc" >"$OUT/skew-alloc.log" 2>&1
say "skew, drop-in, expandable segments and cudaMallocAsync (bound 20 us): rc=$? ($((SECONDS - t0)) s)"
grep -a -A12 "^host time per call" "$OUT/skew-alloc/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
grep -a "^FAIL\|^PASS" "$OUT/skew-alloc/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES='fault|ordering|stream_waits|pipeline' NPS=2 ALLOCS= \
  BUDGET_S=230 timeout 250 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/torch" >"$OUT/torch.log" 2>&1
say "drop-in faults, ordering, stream waits, pipelining (2 processes): rc=$? ($((SECONDS - t0)) s)"
grep -a "^FAIL\|^SKIP" "$OUT/torch/summary.txt" 2>/dev/null | cut -c1-200 | head -10 | tee -a "$s"
grep -a "passed, .* failed" "$OUT/torch.log" | tail -1 | tee -a "$s"
t0=$SECONDS
( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=60 timeout 100 \
    ./test_gpu_multiprocess --gtest_filter="Ranks/MultiProcess.ShareableVmmMemoryMovesDirectly/*" ) >"$OUT/vmm.log" 2>&1
say "VMM memory moved directly, pieces replaced (2, 3, 4 processes): rc=$? ($((SECONDS - t0)) s)"
grep -a "^\[  PASSED\|^\[  FAILED\|FAILED TEST" "$OUT/vmm.log" | head -5 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" skew skew-alloc torch 2>/dev/null && rm -rf "$OUT/skew" "$OUT/skew-alloc" "$OUT/torch"
true
