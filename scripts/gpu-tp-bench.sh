#!/usr/bin/env bash
# conccl-tp-bench on the GPU machine (issue 15 item 3, docs/tp-bench.md): tensor-parallel AG->GEMM and GEMM->RS on
# LLaMA-3 70B / 405B MLP shapes, every GPU of the machine one rank. Run from the repo root with gpu-stage/ carried:
#   TARGETS=conccl-tp-bench scripts/gpu-build.sh                       # CPU machine
#   bash scripts/gpu-tp-bench.sh [OUTDIR] [conccl-tp-bench args...]    # GPU machine, one device call (~2-5 min)
# Two phases: "check" (--check on the smallest token count: every strategy's result against serial NCCL's before any
# time is believed), then "bench" (the full table). Arguments after OUTDIR go to both runs (e.g. --models llama3-70b).
# Env: PHASES (default "check bench"), CHECK_TOKENS (default 2048), CHECK_LIMIT_S (default 200), BENCH_LIMIT_S
#      (default 360), OUT (the device tool's folder; the default OUTDIR, else /tmp/gpu-tp-bench).
# Writes to OUTDIR: tp-check.txt, tp-check.jsonl, tp-bench.txt, tp-bench.jsonl (4 files: within the device tool's 8).
# Exits non-zero when a run fails, fails --check or times out.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"

out="${OUT:-/tmp/gpu-tp-bench}"
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  out="$1"
  shift
fi
mkdir -p "$out"
bin=gpu-stage/bin/conccl-tp-bench
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
# conccl's copy-engine queues and NCCL's streams beside the GEMM streams (as the other GPU scripts).
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
phases="${PHASES:-check bench}"
rc=0

if [ ! -x "$bin" ]; then
  echo "gpu-tp-bench: $bin is missing: run TARGETS=conccl-tp-bench scripts/gpu-build.sh on the CPU machine" >&2
  exit 2
fi
nvidia-smi -L 2>/dev/null | sed 's/^/# /'

step() {  # step NAME LIMIT_S ARGS...: conccl-tp-bench with a deadline, table to NAME.txt, JSON lines to NAME.jsonl
  local name="$1" limit="$2"
  shift 2
  echo "== $name: $bin $* --json $out/$name.jsonl"
  timeout "$limit" "$bin" "$@" --json "$out/$name.jsonl" 2>&1 | tee "$out/$name.txt"
  local r=${PIPESTATUS[0]}
  if [ "$r" -ne 0 ]; then
    echo "FAILED (exit $r$([ "$r" -eq 124 ] && echo ', timed out')): $name"
    rc=1
  fi
}

if [[ " $phases " == *" check "* ]]; then
  step tp-check "${CHECK_LIMIT_S:-200}" --tokens "${CHECK_TOKENS:-2048}" --check --iters 5 --warmup 2 "$@"
fi
if [[ " $phases " == *" bench "* ]]; then
  step tp-bench "${BENCH_LIMIT_S:-360}" "$@"
fi
echo "gpu-tp-bench: results in $out"
exit "$rc"
