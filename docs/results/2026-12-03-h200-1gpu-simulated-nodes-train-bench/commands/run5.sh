#!/usr/bin/env bash
# run 5 (stage: the logging fix, b49750a + whole-line logs): the PyTorch suite with 2 processes, plain NCCL references included
NPS=2 BUDGET_S=480 bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so /tmp/ra > /tmp/ra.txt 2>&1; echo rc=$?; tail -45 /tmp/ra.txt | cut -c1-250; tar czf $OUT/run_all_np2.tgz -C /tmp ra ra.txt
