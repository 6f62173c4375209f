#!/usr/bin/env bash
# The last GPU call of the 2026-11-30 session (2 H200s): every GPU test through gpu-check.sh (both paths, no-hang,
# short soak, CUDA_DEVICE_MAX_CONNECTIONS=1), the queue-claim experiment of issue 13 (the deadlock test with the
# claim off), then as much of the C3 grid (new metric) as the time allows. Logs in one tarball under $OUT.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
OUT="${OUT:-$PWD/gpu-final-out}"
work="$(mktemp -d)"
mkdir -p "$OUT"
OUT="$work/check" BUDGET_S="${CHECK_BUDGET_S:-250}" SKIP_BENCH=1 SKIP_SANITIZER=1 bash scripts/gpu-check.sh >"$work/gpu-check.txt" 2>&1
echo "gpu-check rc=$?"
sed -n '/summary/,$p' "$work/gpu-check.txt" | head -40
CUDA_DEVICE_MAX_CONNECTIONS=32 CONCCL_QUEUE_CLAIM=0 timeout 40 gpu-stage/bin/test_gpu_no_hang \
  --gtest_filter='NoHang.FreshCommunicatorsThreadPerRankAboveSmallThreshold' >"$work/no-hang-claim-off.log" 2>&1
echo "no-hang with CONCCL_QUEUE_CLAIM=0: rc=$? (non-zero = the claim is what prevents the deadlock)"
grep -E "OK|FAILED|did not finish|Failure" "$work/no-hang-claim-off.log" | head -5
timeout "${C3_LIMIT_S:-130}" gpu-stage/bin/conccl-c3 -g 2 --rounds 5 --iters 5 --json "$work/c3.json" >"$work/c3.log" 2>&1
echo "c3 rc=$?"
tail -30 "$work/c3.log"
cp "$work/c3.json" "$OUT/" 2>/dev/null
cp "$work/gpu-check.txt" "$OUT/"
tar -czf "$OUT/logs.tgz" -C "$work" . 2>/dev/null
