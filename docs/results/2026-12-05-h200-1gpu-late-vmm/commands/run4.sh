#!/usr/bin/env bash
# Run 4 (one H200, 2026-12-05, session 42; run 3 was written but never run), stage TARGETS="conccl_mp_worker conccl
# conccl_nccl_shim" at the commit named in the summary's first line. Fits the ~560 s of device time left:
#   1. memory_return (PyTorch's memory back after conccl's calls) through the drop-in with the default allocator,
#      2 and 4 processes: run 2 failed it before the retired ids an entry carries went from 8 to 256;
#   2. host time of one call per round with the peer 1 s late: the real NCCL's own (forwarded through the drop-in,
#      which times every call it is handed) against conccl's, same script, same run.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) $(git log --oneline -1 2>/dev/null | cut -c1-60)"
t0=$SECONDS
PY=/opt/torch/.venv/bin/python CASES=workloads WORKLOAD_CASES=memory_return NPS="2 4" ALLOCS=" " NO_NCCL=1 \
  BUDGET_S=110 timeout 125 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/memret" \
  >"$OUT/memret.log" 2>&1
say "memory_return, default allocator, 2 and 4 processes: rc=$? ($((SECONDS - t0)) s)"
grep -aE "^(FAIL|PASS|SKIP)|passed" "$OUT/memret.log" | cut -c1-400 | tee -a "$s"
grep -rahoE "held_MiB_[a-z_]+\"?: ?[0-9.]+" "$OUT/memret" | sort -u | head -8 | cut -c1-300 | tee -a "$s"
# Cold calls: is the slowdown of one call per round (every lap 5-10x slower than back to back) conccl's or the
# machine's? The drop-in times every NCCL call it is handed, forwarded ones too (src/nccl/call_time.h): with
# CONCCL_NCCL_SHIM=0 it passes every call to the real NCCL (ranks as simulated hosts), so its "own" time is NCCL's
# own host time plus a pass-through. Same script, same sleep, conccl right after.
NCCL_LIB="$(/opt/torch/.venv/bin/python -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))')"
skew() {  # TAG EXPECT-PATH "VAR=VALUE ..." SCRIPT-ARGS...
  local tag="$1" path="$2" vars="$3"
  shift 3
  t0=$SECONDS
  # shellcheck disable=SC2086  # VAR=VALUE words
  timeout -k 5 100 env $vars LD_PRELOAD="$PWD/gpu-stage/lib/libconccl_nccl.so" \
    CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" LD_LIBRARY_PATH="$NCCL_LIB:$LD_LIBRARY_PATH" \
    /opt/torch/.venv/bin/python -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/skew_host_time.py \
    --expect-path "$path" --calls 3 --sleep-s 1 --out "$OUT/skew-$tag.jsonl" "$@" >"$OUT/skew-$tag.log" 2>&1
  say "skew, one call per round, peer 1 s late, $tag: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 "^host time per call" "$OUT/skew-$tag.log" | cut -c1-200 | tee -a "$s"
}
skew nccl-forwarded NCCL "CONCCL_NCCL_SHIM=0" --sim-hosts
skew conccl conccl ""
gzip -f "$OUT"/*.log 2>/dev/null
tar czf "$OUT/torch.tgz" -C "$OUT" memret 2>/dev/null && rm -rf "$OUT/memret"
true
