#!/usr/bin/env bash
# The fused ops from PyTorch, on the GPU machine (issue 15): examples/torch/fused_ops.py (conccl's fused ops through
# ctypes, one process driving every GPU, checked against PyTorch's unfused computation) and, with 2+ GPUs,
# tests/torch/torch_fused_bench.py (PyTorch's own fused_all_gather_matmul / fused_matmul_reduce_scatter and the serial
# NCCL baseline on the LLaMA-3 MLP shapes, torchrun --nproc-per-node 2). Bounded in time; output under $OUT.
#
# Prepare on the CPU machine: scripts/gpu-build.sh (stages gpu-stage/lib/libconccl.so.0 and libconccl_ops.so.0, and
#   gpu-stage/bin/test_gpu_ops_c_api; or only TARGETS="conccl conccl_ops test_gpu_ops_c_api" scripts/gpu-build.sh)
# Run from the repository root on the GPU machine (carry gpu-stage): bash scripts/gpu-torch-fused.sh
# Env: OUT (default ./gpu-torch-fused-out), PY (default /opt/torch/.venv/bin/python), BUDGET_S (default 540),
#      BENCH_ARGS (extra arguments of the bench, e.g. "--models llama3-70b --tokens 2048,8192 --iters 10").
# Files in $OUT: torch-fused-summary.txt, torch-fused-bench.jsonl, torch-fused-logs.tgz.
# Exit status: 0 when every step that ran passed (the bench skipped on one GPU is not a failure); 1 otherwise.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"
# Several ranks sharing one GPU (the example on a one-GPU machine) need more hardware queues than CUDA's default 8.
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
OUT="${OUT:-$root/gpu-torch-fused-out}"
PY="${PY:-/opt/torch/.venv/bin/python}"
BUDGET_S="${BUDGET_S:-540}"
lib="${STAGE:-$root/gpu-stage}/lib"
mkdir -p "$OUT"
logs="$(mktemp -d)"
start="$(date +%s)"
summary=()
failed=0

# step NAME LIMIT CMD...: CMD under a timeout (the smaller of LIMIT and the budget left), output in $logs/NAME.log.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((BUDGET_S - ($(date +%s) - start) - 10))
  if [ "$left" -lt 20 ]; then
    summary+=("$(printf '%-22s NOT RUN (budget spent)' "$name")")
    failed=1
    return
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  local t0 rc verdict=PASS
  t0="$(date +%s)"
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  [ "$rc" -ne 0 ] && verdict="FAIL(rc=$rc)" && failed=1
  [ "$rc" -eq 124 ] && verdict="TIMEOUT(${limit}s)"
  summary+=("$(printf '%-22s %-14s %4ss' "$name" "$verdict" "$(($(date +%s) - t0))")")
}

G="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
{
  echo "date: $(date -u +%FT%TZ)  GPUs: $G  budget: ${BUDGET_S}s  $(git -C "$root" log --oneline -1 2>/dev/null)"
  nvidia-smi -L 2>&1
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda,
                                "nccl", torch.cuda.nccl.version())' 2>&1
  ls -l "$lib" 2>&1
} >"$logs/environment.txt"

# The C interface itself (device-memory checks; both ops from one thread and from a thread per rank, against the host).
bin="${STAGE:-$root/gpu-stage}/bin"
if [ -x "$bin/test_gpu_ops_c_api" ]; then
  # (cuBLASLt from the toolkit, in case the loader does not know its directory; Python gets torch's own)
  step test_gpu_ops_c_api 120 env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64" \
    "$bin/test_gpu_ops_c_api" --gtest_brief=1
  # With a GPU here, a run that skipped every test did not test anything.
  if [ "$G" -ge 1 ] && grep -qE '^\[  PASSED  \] 0 tests' "$logs/test_gpu_ops_c_api.log" 2>/dev/null; then
    summary+=("$(printf '%-22s FAIL (every test skipped on a machine with a GPU)' test_gpu_ops_c_api)")
    failed=1
  fi
else
  summary+=("$(printf '%-22s FAIL (no %s/test_gpu_ops_c_api: run scripts/gpu-build.sh)' test_gpu_ops_c_api "$bin")")
  failed=1
fi

# conccl's fused ops from PyTorch (one process; with one GPU, two ranks share it).
if [ -f "$lib/libconccl.so.0" ] && [ -f "$lib/libconccl_ops.so.0" ]; then
  step example-fused-ops 180 env CONCCL_LIB="$lib/libconccl.so.0" CONCCL_OPS_LIB="$lib/libconccl_ops.so.0" \
    "$PY" examples/torch/fused_ops.py
else
  summary+=("$(printf '%-22s FAIL (no %s/libconccl.so.0 or libconccl_ops.so.0: run scripts/gpu-build.sh)' \
    example-fused-ops "$lib")")
  failed=1
fi

# PyTorch's fused ops and the serial NCCL baseline (2 processes, one GPU each: plain NCCL refuses a shared GPU).
if [ "$G" -ge 2 ]; then
  # shellcheck disable=SC2086
  step torch-fused-bench 420 "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 \
    tests/torch/torch_fused_bench.py --out "$OUT/torch-fused-bench.jsonl" ${BENCH_ARGS:-}
else
  summary+=("$(printf '%-22s SKIP (fewer than 2 GPUs: torch-fused and NCCL need a GPU per process)' torch-fused-bench)")
fi

{
  echo "== gpu-torch-fused summary: $G GPU(s), $(($(date +%s) - start))s of ${BUDGET_S}s =="
  printf '%s\n' "${summary[@]}"
  grep -hE '^\[  (PASSED|FAILED|SKIPPED) +\]' "$logs/test_gpu_ops_c_api.log" 2>/dev/null | head -6
  grep -hE '(allgather_matmul|matmul_reduce_scatter):|^(OK|FAIL)$|Error|error' "$logs/example-fused-ops.log" \
    2>/dev/null | head -8
  grep -hE '^(MISSING|fused-bench:)|Error' "$logs/torch-fused-bench.log" 2>/dev/null | head -8
  # One line per result: model tokens op strategy median (check).
  "$PY" - "$OUT/torch-fused-bench.jsonl" <<'EOF' 2>/dev/null
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    t = f"{r['time_ms_median']:.3f} ms" if "time_ms_median" in r else "error: " + r.get("error", "?")[:80]
    print(f"{r['model']:12} {r['tokens']:6} {r['op']:10} {r['strategy']:12} {t} {r.get('check', '')}")
EOF
} | tee "$OUT/torch-fused-summary.txt"
tar -czf "$OUT/torch-fused-logs.tgz" -C "$logs" .
rm -rf "$logs"
exit "$failed"
