#!/usr/bin/env bash
# The main job for a newcomer: install dependencies, build, and run conccl-bench on what this machine has.
#   GPUs present: conccl against NCCL (when found) on every visible GPU, all-gather .. all-reduce, 8 B .. 256 MB.
#   No GPU:       the host backend (4 ranks as threads), so the whole path runs anywhere.
# Extra arguments are passed to conccl-bench (e.g. -e 1G, --coll all, --json out.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ -d /usr/local/cuda/bin ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
BENCH=build/tools/bench/conccl-bench
GPUS=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then GPUS=$(nvidia-smi -L | wc -l); fi
if [ "$GPUS" -gt 0 ]; then
  BACKENDS=conccl
  if "$BENCH" --help 2>/dev/null | grep -q nccl; then BACKENDS=conccl,nccl; fi
  exec "$BENCH" --backend "$BACKENDS" -g "$GPUS" -b 8 -e 256M -f 4 --coll all_gather,all_to_all,reduce_scatter,all_reduce "$@"
else
  echo "quickstart: no GPU found: running the host backend (ranks are threads; not a performance figure)" >&2
  exec "$BENCH" --backend host -g 4 -b 8 -e 16M -f 8 --coll all "$@"
fi
