#!/usr/bin/env bash
# Run 4 (2026-12-05, session 47, same H200 and stage as run 3, given as one command line): the workloads at 4
# processes that run 3's budget did not reach (default allocator, then expandable segments with CONCCL_VMM_EXPORT=0).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1; [ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage; date -u +%FT%TZ; PY=/opt/torch/.venv/bin/python NO_NCCL=1 CASES=workloads NPS=4 ALLOCS=expandable-old BUDGET_S=230 timeout 250 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so "$OUT/torch4" > "$OUT/torch4.log" 2>&1; echo "rc=$?"; grep -aE "^(PASS|FAIL|SKIP)|passed" "$OUT/torch4.log" | cut -c1-300; gzip -f $OUT/*.log; tar czf $OUT/torch4.tgz -C $OUT torch4 && rm -rf $OUT/torch4
