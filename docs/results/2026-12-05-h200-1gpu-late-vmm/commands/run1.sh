#!/usr/bin/env bash
# Run 1 (one H200, 2026-12-05, session 41), stage TARGETS="test_gpu_multiprocess conccl_mp_worker conccl
# conccl_nccl_shim" at 2eb608d:
#   1. test_gpu_multiprocess whole but the C API skew test and CrossNode (the VMM export scenario, pair-owned late
#      calls, deferred skew with its new one-call rounds, the kill cases, ...);
#   2. CallsDoNotWaitForLatePeers/0 (2 processes, peer 2 s late) with its bound lifted (CONCCL_TEST_MAX_HOST_US=1e6,
#      so every round's results are checked and reported): at the defaults, with calls up to 8 MiB routed
#      (CONCCL_STAGED_MAX_BYTES=0), and with TRACE laps.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
BT="$PWD/gpu-stage/lib/libbt_on_signal.so"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
verdicts() { grep -a -E '^\[  (PASSED|FAILED) |^\[  FAILED  \]|tests ran' "$1" | head -14 | cut -c1-200 | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
t0=$SECONDS
CONCCL_TEST_WORKER_LIMIT_S=60 LD_PRELOAD="$BT" timeout 390 gpu-stage/bin/test_gpu_multiprocess --gtest_brief=1 \
  --gtest_filter='-*.CallsDoNotWaitForLatePeers*:*CrossNode*' >"$OUT/mp.log" 2>&1
say "test_gpu_multiprocess (all but the C API skew test and CrossNode): rc=$? ($((SECONDS - t0)) s)"
verdicts "$OUT/mp.log"
grep -a -E "FAILED:|VMM|staged instead|vmm" "$OUT/mp.log" | grep -av "^\[" | sort | uniq -c | head -12 | cut -c1-300 |
  tee -a "$s"
for v in "default" "routed CONCCL_STAGED_MAX_BYTES=0" "laps CONCCL_DEBUG=TRACE"; do
  name="${v%% *}"
  envs="${v#* }"
  [ "$name" = default ] && envs=""
  left=$((585 - SECONDS))
  [ $left -lt 40 ] && { say "skew $name: skipped (time)"; continue; }
  t0=$SECONDS
  env $envs CONCCL_TEST_MAX_HOST_US=1000000 CONCCL_TEST_WORKER_LIMIT_S=60 timeout $((left < 100 ? left : 100)) \
    gpu-stage/bin/test_gpu_multiprocess --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' \
    >"$OUT/skew-$name.log" 2>&1
  say "skew $name ($envs): rc=$? ($((SECONDS - t0)) s)"
  grep -a -A8 "rank 0: host time per call" "$OUT/skew-$name.log" | head -9 | cut -c1-330 | tee -a "$s"
done
grep -a "host laps of" "$OUT/skew-laps.log" | grep -a "rank 0 " >"$OUT/laps-rank0.txt"
awk '{k = $0; sub(/.*host laps of /, "", k); sub(/ #[0-9]+:.*/, "", k); last[k] = $0} END {for (k in last) print last[k]}' \
  "$OUT/laps-rank0.txt" | sed 's/.*host laps of //' | cut -c1-330 | tee -a "$s"
grep -a "no spin\|is pair-owned:\|is staged:" "$OUT/skew-laps.log" | grep -a "rank 0 " | sed 's/.*CONCCL TRACE //' |
  sed -E 's/seq [0-9]+/seq N/; s/was [0-9]+ us/was N us/; s/data of [0-9]+/data of N/' |
  sort | uniq -c | sort -rn | head -6 | cut -c1-200 | tee -a "$s"
gzip -f "$OUT"/*.log 2>/dev/null
true
