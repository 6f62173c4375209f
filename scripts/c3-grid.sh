#!/usr/bin/env bash
# conccl-c3 on a multi-GPU machine (the lead runs it; built by scripts/gpu-build.sh into gpu-stage/):
#   1. --calibrate: the planner's slowdowns per strategy, GEMM bound and collective kind (~1 min on 2 H200s),
#   2. the built-in grid, every strategy and auto, 5 interleaved rounds, auto deciding with that calibration
#      (~3-5 min on 2 H200s).
# Everything lands in $OUT (default /tmp/c3-out): logs, JSON, the calibration file, c3-results.tar.gz; the plot
# is attempted with the first python that has matplotlib (else: python3 tools/c3/plot_c3.py c3.json c3.png
# on any machine).
# Env: RANKS (default 2), ROUNDS (5), ITERS (10), C3_BIN (gpu-stage/bin/conccl-c3), EXTRA (more flags).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${C3_BIN:-$root/gpu-stage/bin/conccl-c3}"
out="${OUT:-/tmp/c3-out}"
ranks="${RANKS:-2}"
rounds="${ROUNDS:-5}"
iters="${ITERS:-10}"
mkdir -p "$out"
# DEVICE.md: never multicast on shared machines; NCCL for the baselines from PyTorch's environment.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
export CONCCL_C3_PLOT_SCRIPT="$root/tools/c3/plot_c3.py"
for py in /opt/torch/.venv/bin python3; do
  if "$py" -c 'import matplotlib' 2>/dev/null; then export PATH="$(dirname "$(command -v "$py")"):$PATH"; break; fi
done

nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/gpus.txt" 2>&1
start=$(date +%s)
"$bin" -g "$ranks" --rounds "$rounds" --iters "$iters" --calibrate "$out/c3-calibration.json" \
  --json "$out/c3-calibration-rows.json" ${EXTRA:-} >"$out/c3-calibration.log" 2>&1
cal_rc=$?
mid=$(date +%s)
cal_flag=()
[ -s "$out/c3-calibration.json" ] && cal_flag=(--calibration "$out/c3-calibration.json")
"$bin" -g "$ranks" --rounds "$rounds" --iters "$iters" "${cal_flag[@]}" --json "$out/c3.json" \
  --plot "$out/c3.png" ${EXTRA:-} >"$out/c3.log" 2>&1
grid_rc=$?
end=$(date +%s)
tar -C "$out" -czf "$out/c3-results.tar.gz" --exclude c3-results.tar.gz . 2>/dev/null
echo "calibration rc=$cal_rc ($((mid - start)) s), grid rc=$grid_rc ($((end - mid)) s); files in $out"
grep '^# summary' "$out/c3-calibration.log" "$out/c3.log"
tail -3 "$out/c3.log"
