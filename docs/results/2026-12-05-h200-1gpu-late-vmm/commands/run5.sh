#!/usr/bin/env bash
# Run 5 (one H200, 2026-12-05, session 42), the stage of run 4 (same build): host time of calls back to back (nine
# per round, each timed: the peer is two or more calls behind from the second on), peer 1 s late, the real NCCL's own
# (forwarded through the timing drop-in, CONCCL_NCCL_SHIM=0, ranks as simulated hosts) against conccl's.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
NCCL_LIB="$(/opt/torch/.venv/bin/python -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))')"
skew() {  # TAG EXPECT-PATH "VAR=VALUE ..." SCRIPT-ARGS...
  local tag="$1" path="$2" vars="$3"
  shift 3
  t0=$SECONDS
  # shellcheck disable=SC2086  # VAR=VALUE words
  timeout -k 5 100 env $vars LD_PRELOAD="$PWD/gpu-stage/lib/libconccl_nccl.so" \
    CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" LD_LIBRARY_PATH="$NCCL_LIB:$LD_LIBRARY_PATH" \
    /opt/torch/.venv/bin/python -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/skew_host_time.py \
    --expect-path "$path" --calls 2 --burst 9 --sleep-s 1 --out "$OUT/skew-$tag.jsonl" "$@" >"$OUT/skew-$tag.log" 2>&1
  say "skew, 9 calls per round, peer 1 s late, $tag: rc=$? ($((SECONDS - t0)) s)"
  grep -a -A12 "^host time per call" "$OUT/skew-$tag.log" | cut -c1-200 | tee -a "$s"
}
skew nccl-forwarded NCCL "CONCCL_NCCL_SHIM=0" --sim-hosts
skew conccl conccl ""
gzip -f "$OUT"/*.log 2>/dev/null
true
