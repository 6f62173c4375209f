#!/usr/bin/env bash
# Run 1 (one H200, 2026-12-03), from the repository root with build-wheel/ carried (no gpu-stage: everything below
# runs on what `pip install .` builds on that machine):
#   1. `pip install .` from this tree into torch's venv, offline: scikit-build-core, packaging, pathspec, cmake and
#      ninja come as wheels in build-wheel/deps (`pip download` on the CPU machine); issue 26
#   2. `conccl info`, then `conccl run torchrun --nproc-per-node 2 tools/train_bench/train_bench.py` (50 steps)
#   3. a simulated node that dies (2x2, 3x2; host and GPU waits) and the 3x2 training workloads, through the installed
#      drop-in (tests/nccl/run_simulated_nodes.sh with LAYOUTS=""); issue 25 item 3
# Output under $OUT: pip-install.log, info.txt, bench-2proc.{log,jsonl}, simulated-nodes.tgz, summary.txt.
set -u
root="$PWD"
OUT="${OUT:-/tmp/out}"
PY=/opt/torch/.venv/bin/python
bin=/opt/torch/.venv/bin
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) $(git log --oneline -1 2>/dev/null | cut -c1-60)"
say "cmake on PATH: $(command -v cmake || echo none) $(cmake --version 2>/dev/null | head -1); ninja: $(command -v ninja || echo none); nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)"
export PATH="$PATH:/usr/local/cuda/bin"
t0=$SECONDS
"$PY" -m pip uninstall -y -q conccl >/dev/null 2>&1
CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 330 "$PY" -m pip install --no-index --find-links build-wheel/deps \
  -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=90 -Cbuild-dir=/tmp/conccl-pip-build . >"$OUT/pip-install.log" 2>&1
rc=$?
say "pip install . (source, offline): rc=$rc ($((SECONDS - t0)) s): $(tail -1 "$OUT/pip-install.log" | cut -c1-160)"
[ "$rc" -eq 0 ] || exit 1
cd /tmp || exit 1   # away from the tree: the installed package, not python/ of the tree
"$bin/conccl" info >"$OUT/info.txt" 2>&1
say "conccl info: rc=$? ($(grep -c . "$OUT/info.txt") lines; $(grep 'ABI check' "$OUT/info.txt"))"
pkg="$("$PY" -c 'import conccl, os; print(os.path.dirname(conccl.__file__))' 2>&1)"
say "package: $pkg; libs: $(ls "$pkg/lib" | tr '\n' ' ')"
t0=$SECONDS
timeout -k 10 150 "$bin/conccl" run "$bin/torchrun" --standalone --nproc-per-node 2 \
  "$root/tools/train_bench/train_bench.py" --model llama3-8b --layers 2 --seq 512 --batch 2 --steps 45 --warmup 5 \
  --progress-every 10 --label conccl-2proc-pip --out "$OUT/bench-2proc.jsonl" >"$OUT/bench-2proc.log" 2>&1
say "conccl run torchrun --nproc-per-node 2 train_bench.py: rc=$? ($((SECONDS - t0)) s), $(grep -c -- '-> conccl (' "$OUT/bench-2proc.log") conccl communicator lines"
grep -v '^\[' "$OUT/bench-2proc.log" | grep -E 'label|conccl-2proc-pip|share a GPU' | head -4 | tee -a "$s"
cd "$root" || exit 1
t0=$SECONDS
SHIM="$pkg/lib/libconccl_nccl.so" LAYOUTS="" WORKLOAD_LAYOUTS="3x2" LIMIT=100 \
  bash tests/nccl/run_simulated_nodes.sh >/dev/null 2>&1
say "simulated nodes (node death 2x2 3x2, workloads 3x2): rc=$? ($((SECONDS - t0)) s)"
grep -E '^(PASS|FAIL)' "$OUT/simulated-nodes/summary.txt" | cut -c1-700 | tee -a "$s"
tar czf "$OUT/simulated-nodes.tgz" -C "$OUT" simulated-nodes && rm -rf "$OUT/simulated-nodes"
