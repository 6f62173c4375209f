#!/usr/bin/env bash
# The training benchmark and conccl.torch on ONE H200 (ranks share the GPU), under plain NCCL and under `conccl run`,
# with the losses compared. Everything lands under $OUT. About 5-6 minutes.
#
# The GPU machine cannot reach PyPI, so the package comes built from the CPU machine:
#   here:  CMAKE_BUILD_PARALLEL_LEVEL=2 pip wheel . -w build-wheel --no-deps     (build-wheel/ is git-ignored)
#   there: bash tools/train_bench/run_one_gpu.sh                                (carry build-wheel)
# The wheel is unpacked into a scratch directory (a zip; nothing is installed into the torch venv) and its libraries
# used through CONCCL_LIB_DIR, with the Python sources of this tree (python/) on PYTHONPATH.
# Without a wheel, the package is used from this tree (python/) with the libraries in $CONCCL_LIB_DIR (default
# gpu-stage/lib, as scripts/gpu-build.sh stages them: libconccl.so, libconccl_nccl.so, libconccl_ops.so).
# Env: OUT, PY (default /opt/torch/.venv/bin/python), WHEEL, CONCCL_LIB_DIR, STEPS (measured, default 45),
#      WARMUP (default 5), LAYERS (2), SEQ (512), GLOBAL_BATCH (4 sequences per step, split over the data-parallel
#      ranks), RUN_TIMEOUT_S (per run, default 150).
# Exit status: 0 when every run that ran passed and the losses matched; 1 otherwise.
set -u
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root" || exit 2
OUT="${OUT:-$root/train-bench-out}"
PY="${PY:-/opt/torch/.venv/bin/python}"
STEPS="${STEPS:-45}"
WARMUP="${WARMUP:-5}"
LAYERS="${LAYERS:-2}"
SEQ="${SEQ:-512}"
GLOBAL_BATCH="${GLOBAL_BATCH:-4}"
RUN_TIMEOUT_S="${RUN_TIMEOUT_S:-150}"
# Never NVLink multicast on the shared machines (../shared/DEVICE.md); as scripts/gpu-env.sh.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT/logs"
work="$(mktemp -d)"
summary="$OUT/summary.txt"
: >"$summary"
failed=0
say() { echo "$*" | tee -a "$summary"; }

WHEEL="${WHEEL:-$(ls "$root"/build-wheel/conccl-*.whl 2>/dev/null | head -1)}"
if [ -n "$WHEEL" ] && [ -f "$WHEEL" ]; then
  "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$WHEEL" "$work/site" || exit 2
  # The wheel's libraries with this tree's Python sources (a fix to python/ then needs no rebuild).
  export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
  export CONCCL_LIB_DIR="$work/site/conccl/lib"
  say "package: python/ of this tree, libraries of $WHEEL"
else
  export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
  staged="${CONCCL_LIB_DIR:-$root/gpu-stage/lib}"
  # scripts/gpu-build.sh stages libconccl.so.0 and libconccl_ops.so.0; the package looks for the unversioned names.
  mkdir -p "$work/lib"
  for f in "$staged"/*.so "$staged"/*.so.0; do
    [ -e "$f" ] || continue
    ln -sf "$f" "$work/lib/$(basename "$f")"
    case "$f" in *.so.0) ln -sf "$f" "$work/lib/$(basename "$f" .0)" ;; esac
  done
  export CONCCL_LIB_DIR="$work/lib"
  say "package: $root/python with the libraries of $staged (no wheel in build-wheel/)"
fi
G="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
say "date: $(date -u +%FT%TZ)  GPUs: $G  $(git -C "$root" log --oneline -1 2>/dev/null)"
"$PY" -m conccl info >"$OUT/info.txt" 2>&1 || failed=1
cat "$OUT/info.txt" >>"$summary"

bench=(tools/train_bench/train_bench.py --model llama3-8b --layers "$LAYERS" --seq "$SEQ" --steps "$STEPS"
       --warmup "$WARMUP" --progress-every 10)
torchrun=("$PY" -m torch.distributed.run --standalone)
files=()
# run NAME NP BATCH_PER_DP_RANK [conccl] [extra bench args...]: one benchmark run, bounded; appends to $OUT/NAME.jsonl.
run() {
  local name="$1" np="$2" batch="$3" via="$4"
  shift 4
  local cmd=("${torchrun[@]}" --nproc-per-node "$np" "${bench[@]}" --batch "$batch" --label "$name"
             --out "$OUT/$name.jsonl" "$@")
  [ "$via" = conccl ] && cmd=("$PY" -m conccl run "${cmd[@]}")
  rm -f "$OUT/$name.jsonl"
  local t0=$SECONDS
  timeout -k 10 "$RUN_TIMEOUT_S" "${cmd[@]}" >"$OUT/logs/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -eq 0 ] && [ -s "$OUT/$name.jsonl" ]; then
    say "[PASS] $name ($((SECONDS - t0)) s) $(grep -c -- '-> conccl (' "$OUT/logs/$name.log") conccl communicators"
    files+=("$OUT/$name.jsonl")
  else
    failed=1
    say "[FAIL] $name rc=$rc ($((SECONDS - t0)) s): $(grep -E 'Error|error|refus|MISMATCH|TIMED' "$OUT/logs/$name.log" | grep -v ChildFailedError | head -3 | cut -c1-300 | tr '\n' ' ')"
  fi
}

# The reference: one process, the whole global batch (plain NCCL with one rank runs on one GPU).
run nccl-1proc 1 "$GLOBAL_BATCH" nccl
for np in 2 4; do
  if [ "$G" -ge "$np" ]; then
    run "nccl-${np}proc" "$np" $((GLOBAL_BATCH / np)) nccl
  else
    say "[SKIP] nccl-${np}proc: plain NCCL refuses ranks that share a GPU ($G GPU(s))"
  fi
  run "conccl-${np}proc" "$np" $((GLOBAL_BATCH / np)) conccl
done
# FSDP2 x TP on conccl: dp 2 x tp 2 (TP's all-reduces and the sub-communicators made by ncclCommSplit).
run conccl-4proc-tp2 4 $((GLOBAL_BATCH / 2)) conccl --tp 2

# conccl.torch: the fused ops as custom ops, eager and compiled, against PyTorch's unfused computation.
t0=$SECONDS
if timeout -k 10 "$RUN_TIMEOUT_S" "$PY" -m conccl run "${torchrun[@]}" --nproc-per-node 2 \
    tools/train_bench/check_torch_ops.py >"$OUT/logs/torch-ops.log" 2>&1; then
  say "[PASS] conccl.torch ops, 2 ranks ($((SECONDS - t0)) s)"
else
  failed=1
  say "[FAIL] conccl.torch ops ($((SECONDS - t0)) s): $(grep -E 'FAIL|Error' "$OUT/logs/torch-ops.log" | head -3 | cut -c1-300 | tr '\n' ' ')"
fi
grep -E ': (OK|FAIL)' "$OUT/logs/torch-ops.log" >>"$summary"

if [ "${#files[@]}" -gt 0 ]; then
  "$PY" tools/train_bench/compare.py "${files[@]}" --reference nccl-1proc --plot "$OUT/train_bench.png" \
    >"$OUT/compare.txt" 2>&1 || failed=1
  cat "$OUT/compare.txt" | tee -a "$summary"
fi
say "result: $([ "$failed" -eq 0 ] && echo PASS || echo FAIL)"
rm -rf "$work"
exit "$failed"
