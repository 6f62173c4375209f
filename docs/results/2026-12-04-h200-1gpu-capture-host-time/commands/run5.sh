#!/usr/bin/env bash
# Run 5 (one H200, 2026-12-04, session 38), stage as run 3 after the capture checks of every call across processes
# (waitAndLaunch: invalidated before or during this call): the unstaged reference scenario at 3 and 4 processes,
# repeated until it fails (at most ~200 s); which call first sees the capture invalidated.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"

s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader)"
i=0
while [ $SECONDS -lt 200 ]; do
  i=$((i + 1)); t0=$SECONDS
  CONCCL_TEST_WORKER_LIMIT_S=30 timeout 80 gpu-stage/bin/test_gpu_multiprocess \
    --gtest_filter='*EveryCollectiveMatchesTheReferenceUnstaged/1:*EveryCollectiveMatchesTheReferenceUnstaged/2' \
    >"$OUT/unstaged-$i.log" 2>&1
  rc=$?
  say "unstaged 3+4 processes, round $i: rc=$rc ($((SECONDS - t0)) s)"
  if [ $rc -ne 0 ]; then
    grep -a -i -E 'cuda|capture|invalid' "$OUT/unstaged-$i.log" | grep -a -v '^\[' | sort | uniq -c | sort -rn | head -30 | cut -c1-400 | tee -a "$s"
    break
  fi
  rm -f "$OUT/unstaged-$i.log"
done
gzip -f "$OUT"/*.log 2>/dev/null
