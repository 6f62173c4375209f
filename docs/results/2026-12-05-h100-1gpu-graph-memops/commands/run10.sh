#!/usr/bin/env bash
# Run 10 (2026-12-05, session 48; asked for nvidia-h200, ran on an H100), stage 79e39b2: the PyTorch cases that lean on the watchdog and the call order
# through the drop-in, 2 processes (fault cases: kill on host / GPU, abort through each API, bootstrap intruder;
# ordering; stream waits; pipelining beside DDP), then the late-call test with 2, 3 and 4 processes (bound 20 us).
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES='fault|ordering|stream_waits|pipeline' NPS=2 ALLOCS= \
  BUDGET_S=230 timeout 250 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/torch" >"$OUT/torch.log" 2>&1
say "drop-in faults, ordering, stream waits, pipelining (2 processes): rc=$? ($((SECONDS - t0)) s)"
grep -a "^FAIL\|^SKIP" "$OUT/torch/summary.txt" 2>/dev/null | cut -c1-200 | head -10 | tee -a "$s"
grep -a "passed, .* failed" "$OUT/torch.log" | tail -1 | tee -a "$s"
for np in 0 1 2; do
  t0=$SECONDS
  ( cd gpu-stage/bin && LD_LIBRARY_PATH="$PWD/../lib:${LD_LIBRARY_PATH:-}" CONCCL_TEST_WORKER_LIMIT_S=60 timeout 60 \
      ./test_gpu_multiprocess --gtest_filter="Ranks/MultiProcess.CallsDoNotWaitForLatePeers/$np" ) >"$OUT/late$np.log" 2>&1
  say "late, $((np + 2)) processes, bound 20 us: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A3 "host time per call" "$OUT/late$np.log" | grep -a "AllReduce" | head -3 | cut -c1-60 | tee -a "$s"
done
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" torch 2>/dev/null && rm -rf "$OUT/torch"
true
