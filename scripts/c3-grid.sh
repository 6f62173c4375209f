#!/usr/bin/env bash
# conccl-c3 on a multi-GPU machine (the lead runs it; built by scripts/gpu-build.sh into gpu-stage/):
#   1. --calibrate: the planner's slowdowns per strategy, GEMM bound and collective kind (~1 min on 2 H200s),
#   2. the built-in grid, every strategy and auto, 5 interleaved rounds, auto deciding with that calibration
#      (~3-5 min on 2 H200s).
# $OUT (default /tmp/c3-out) receives five files (the device tool brings back at most 8): c3.log, c3.json,
# c3-calibration.log, c3-calibration.json and c3-results.tar.gz (everything: both logs and JSONs, the calibration file, the plot,
# the GPUs' clocks). The plot is attempted with the first python that has matplotlib (else: python3
# tools/c3/plot_c3.py c3.json c3.png on any machine).
# Env: RANKS (default 2), ROUNDS (5), ITERS (10), C3_BIN (gpu-stage/bin/conccl-c3), EXTRA (more flags),
# CAL (an existing calibration file: skip step 1), GRID=0 (step 1 only). Split into two calls when one would
# come near the device tool's 10-minute limit.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${C3_BIN:-$root/gpu-stage/bin/conccl-c3}"
final="${OUT:-/tmp/c3-out}"
out="$(mktemp -d)"
ranks="${RANKS:-2}"
rounds="${ROUNDS:-5}"
iters="${ITERS:-10}"
mkdir -p "$final"
# DEVICE.md: never multicast on shared machines; NCCL for the baselines from PyTorch's environment.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
export CONCCL_C3_PLOT_SCRIPT="$root/tools/c3/plot_c3.py"
for py in /opt/torch/.venv/bin/python3 python3; do
  if "$py" -c 'import matplotlib' 2>/dev/null; then export PATH="$(dirname "$(command -v "$py")"):$PATH"; break; fi
done

nvidia-smi --query-gpu=index,name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/gpus.txt" 2>&1
start=$(date +%s)
cal_rc=skipped
if [ -n "${CAL:-}" ]; then
  cp "$CAL" "$out/c3-calibration.json"
  echo "# calibration from $CAL" >"$out/c3-calibration.log"
else
  "$bin" -g "$ranks" --rounds "$rounds" --iters "$iters" --calibrate "$out/c3-calibration.json" \
    --json "$out/c3-calibration-rows.json" ${EXTRA:-} >"$out/c3-calibration.log" 2>&1
  cal_rc=$?
fi
mid=$(date +%s)
cal_flag=()
[ -s "$out/c3-calibration.json" ] && cal_flag=(--calibration "$out/c3-calibration.json")
grid_rc=skipped
if [ "${GRID:-1}" != 0 ]; then
  "$bin" -g "$ranks" --rounds "$rounds" --iters "$iters" "${cal_flag[@]}" --json "$out/c3.json" \
    --plot "$out/c3.png" ${EXTRA:-} >"$out/c3.log" 2>&1
  grid_rc=$?
fi
touch "$out/c3.log"
end=$(date +%s)
tar -C "$out" -czf "$final/c3-results.tar.gz" . 2>/dev/null
cp "$out/c3.log" "$out/c3-calibration.log" "$final/" 2>/dev/null
[ -f "$out/c3.json" ] && cp "$out/c3.json" "$final/"
[ -f "$out/c3-calibration.json" ] && cp "$out/c3-calibration.json" "$final/"
echo "calibration rc=$cal_rc ($((mid - start)) s), grid rc=$grid_rc ($((end - mid)) s); files in $final"
grep '^# summary' "$out/c3-calibration.log" "$out/c3.log"
tail -3 "$out/c3.log"
rm -rf "$out"
