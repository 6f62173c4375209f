#!/usr/bin/env bash
# Run 7 (one H200, 2026-12-04), from the repository root with gpu-stage/ and .probe/prefix-lib/ carried: run 5 found
# one call that held rank 0's thread 2.0 s (the peer's sleep). Suspected: a peer's retired allocation unmapped
# (cudaIpcCloseMemHandle, which waits for the whole device and holds the driver meanwhile) while this rank's staged
# call waited on the GPU for the late peer. The fix makes closes wait for a moment when no conccl work is pending and
# no launch is being enqueued (exec/cuda/host_gated_work.h). skew_host_time.py --realloc makes every round retire
# the previous buffers with an on-time call just before the late burst; run with the library before the fix
# (.probe/prefix-lib: libconccl_nccl.so of commit 11d238e, the one before the fix, built the same way and stripped)
# and after it (gpu-stage), twice each, alternating.
# Then, as a regression check of the fix, test_gpu_multiprocess (without late-skew) and test_gpu_collectives.
# Output under $OUT: burst-{before,after}-{1,2}.log.gz, gpu-tests.tgz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
s="$OUT/summary.txt"
echo "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)" | tee -a "$s"
root=$PWD
cd tests/torch
for i in 1 2; do
  for v in before after; do
    lib="$root/gpu-stage/lib/libconccl_nccl.so"
    [ "$v" = before ] && lib="$root/.probe/prefix-lib/libconccl_nccl.so"
    env -u PYTORCH_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF LD_PRELOAD="$lib" \
      CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" LD_LIBRARY_PATH="$NCCL_LIB:$root/gpu-stage/lib" \
      timeout 150 /opt/torch/.venv/bin/python -m torch.distributed.run --standalone --nproc-per-node 2 \
      skew_host_time.py --calls 2 --burst 4 --realloc --max-mib 64 --expect-path conccl \
      >"$OUT/burst-$v-$i.log" 2>&1
    echo "$v $i: rc=$?" | tee -a "$s"
    grep -a -E '^\| [a-z]' "$OUT/burst-$v-$i.log" | tee -a "$s"
    gzip -f "$OUT/burst-$v-$i.log"
  done
done
cd "$root"
tar xzf gpu-stage/bin.tgz -C gpu-stage
export LD_LIBRARY_PATH="$root/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
mkdir -p /tmp/logs
t0=$SECONDS
timeout $((570 - SECONDS > 60 ? 570 - SECONDS - 30 : 30)) gpu-stage/bin/test_gpu_multiprocess \
  --gtest_filter='-*CallsDoNotWaitForLatePeers*' >/tmp/logs/multiprocess.log 2>&1
echo "test_gpu_multiprocess without late-skew: rc=$? ($((SECONDS - t0)) s)" | tee -a "$s"
grep -a -E '^\[  (PASSED|FAILED) |^\[==========\] .* ran' /tmp/logs/multiprocess.log | head -12 | tee -a "$s"
t0=$SECONDS
timeout 25 gpu-stage/bin/test_gpu_collectives >/tmp/logs/collectives.log 2>&1
echo "test_gpu_collectives: rc=$? ($((SECONDS - t0)) s)" | tee -a "$s"
grep -a -E '^\[  (PASSED|FAILED) |^\[==========\] .* ran' /tmp/logs/collectives.log | head -6 | tee -a "$s"
tar czf "$OUT/gpu-tests.tgz" -C /tmp logs
