#!/usr/bin/env bash
# Run 3 (one H200, 2026-12-03), from the repository root with gpu-stage/ carried (conccl, the drop-in,
# test_gpu_multiprocess, conccl_mp_worker): where a late call's host time goes (issue 24 item 1), from the host laps
# that CONCCL_DEBUG=TRACE logs per call (base/host_laps.h), with the route's spin at its default (50 us) and at 5 us:
#   1. the C API: test_gpu_multiprocess CallsDoNotWaitForLatePeers/0 (2 processes, peers 2 s late; the test fails on
#      its 20 us bound where the p50 is above it)
#   2. the drop-in: tests/torch/skew_host_time.py through run_all.sh (2 processes, rank 1 2 s late, 5 calls per op;
#      spin 50 us only: the laps show the spin's share)
# Output under $OUT: capi-spin{50,5}.log.gz, dropin-spin50.tgz, laps.txt (the laps lines, rank 0), summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
for spin in 50 5; do
  t0=$SECONDS
  CONCCL_DEBUG=TRACE CONCCL_RENDEZVOUS_SPIN_US=$spin timeout 200 gpu-stage/bin/test_gpu_multiprocess \
    --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' >"$OUT/capi-spin$spin.log" 2>&1
  say "C API late-skew, spin $spin us: rc=$? ($((SECONDS - t0)) s)"
  grep -a -E 'p50|host time' "$OUT/capi-spin$spin.log" | grep -av 'host laps' | head -24 | cut -c1-200 | tee -a "$s"
  grep -a 'rank 0 .*host laps of' "$OUT/capi-spin$spin.log" | sed 's/^.*host laps of/capi spin '"$spin"':/' >>"$OUT/laps.txt"
  gzip -f "$OUT/capi-spin$spin.log"
done
for spin in 50; do
  t0=$SECONDS
  CONCCL_DEBUG=TRACE CONCCL_RENDEZVOUS_SPIN_US=$spin CASES=skew NO_NCCL=1 SKEW_CALLS=5 BUDGET_S=150 \
    bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so /tmp/rs$spin >/tmp/rs$spin.txt 2>&1
  say "drop-in skew, spin $spin us: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 '^host time per call' /tmp/rs$spin/summary.txt | head -14 | tee -a "$s"
  grep -ah 'rank 0 .*host laps of' /tmp/rs$spin/logs/*.log | sed 's/^.*host laps of/dropin spin '"$spin"':/' >>"$OUT/laps.txt"
  for f in /tmp/rs$spin/logs/*.log; do gzip -f "$f"; done
  tar czf "$OUT/dropin-spin$spin.tgz" -C /tmp rs$spin rs$spin.txt
done
say "laps lines: $(wc -l <"$OUT/laps.txt")"
