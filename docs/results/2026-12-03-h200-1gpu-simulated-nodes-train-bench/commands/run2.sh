#!/usr/bin/env bash
# run 2 (stage b49750a, no wheel: the staged libraries): the 50-step training benchmark, plain NCCL 1 process vs conccl 2 / 4 / 4 (dp2 x tp2) processes, conccl.torch ops
RUN_TIMEOUT_S=120 bash tools/train_bench/run_one_gpu.sh > /dev/null 2>&1; echo rc=$?; cut -c1-300 "$OUT/summary.txt" | tail -50
