#!/usr/bin/env bash
# One device call on one H200 (2026-12-03), from the repository root, with gpu-stage/ and build-wheel/ carried:
#   1. tests/nccl/run_simulated_nodes.sh: 2x2, 2x3, 3x2 simulated nodes through the drop-in (issue 25)
#   2. `pip install .` from this tree into the torch venv (no network there: scikit-build-core and its two
#      dependencies come as wheels in build-wheel/deps, downloaded on the CPU machine with `pip download`), then
#      `conccl info` and `conccl run torchrun --nproc-per-node 2 tools/train_bench/train_bench.py` (issue 26)
# Output under $OUT: simulated-nodes/, pip-install.log, info.txt, bench-2proc.{log,jsonl}, summary.txt.
set -u
root="$PWD"
OUT="${OUT:-/tmp/out}"
PY=/opt/torch/.venv/bin/python
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1) $(git log --oneline -1 2>/dev/null | cut -c1-60)"
t0=$SECONDS
LIMIT="${LIMIT:-90}" bash tests/nccl/run_simulated_nodes.sh >/dev/null 2>&1
say "simulated nodes: rc=$? ($((SECONDS - t0)) s)"
head -7 "$OUT/simulated-nodes/summary.txt" | tail -6 | cut -c1-400 | tee -a "$s"
grep -h 'simulated-nodes rank .*: FAIL' "$OUT"/simulated-nodes/*.log | cut -c1-300 | sort | uniq -c | head -5 | tee -a "$s"
# 2. pip install . (a source build: scikit-build-core drives CMake; nvcc 13.0 and cmake are on the machine)
t0=$SECONDS
CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 360 "$PY" -m pip install --no-index --find-links build-wheel/deps \
  -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90 . >"$OUT/pip-install.log" 2>&1
rc=$?
say "pip install . : rc=$rc ($((SECONDS - t0)) s): $(tail -1 "$OUT/pip-install.log" | cut -c1-200)"
if [ "$rc" -ne 0 ]; then
  whl="$(ls build-wheel/conccl-*.whl | head -1)"
  "$PY" -m pip install --no-index --no-deps "$whl" >>"$OUT/pip-install.log" 2>&1
  say "fallback: pip install $whl: rc=$?"
fi
bin=/opt/torch/.venv/bin
cd /tmp || exit 1   # away from the tree: the installed package, not python/ of the tree
"$bin/conccl" info >"$OUT/info.txt" 2>&1
say "conccl info: rc=$? ($(grep -c . "$OUT/info.txt") lines; $(grep 'ABI check' "$OUT/info.txt"))"
say "package: $("$PY" -c 'import conccl, conccl._libs as l; print(conccl.__file__)' 2>&1)"
t0=$SECONDS
timeout -k 10 240 "$bin/conccl" run "$bin/torchrun" --standalone --nproc-per-node 2 \
  "$root/tools/train_bench/train_bench.py" --model llama3-8b --layers 2 --seq 512 --batch 2 --steps 45 --warmup 5 \
  --progress-every 10 --label conccl-2proc-pip --out "$OUT/bench-2proc.jsonl" >"$OUT/bench-2proc.log" 2>&1
say "conccl run torchrun --nproc-per-node 2 train_bench.py: rc=$? ($((SECONDS - t0)) s), $(grep -c -- '-> conccl (' "$OUT/bench-2proc.log") conccl communicator lines"
grep -v '^\[' "$OUT/bench-2proc.log" | grep -E 'label|conccl-2proc-pip|share a GPU' | head -5 | tee -a "$s"
