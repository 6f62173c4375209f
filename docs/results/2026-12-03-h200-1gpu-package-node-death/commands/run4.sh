#!/usr/bin/env bash
# Run 4 (one H200, 2026-12-03), from the repository root with gpu-stage/ carried: the PyTorch suite through the drop-in
# with 4 processes sharing the GPU (workloads, ordering, pipelining beside DDP, stream waits, kill / abort / intruder
# faults, then the expandable-segments allocator variants), without plain-NCCL references (NO_NCCL=1: with simulated
# hosts they deadlock on the ordering cases, 2026-12-03 run 5 of the earlier folder) and without the 2-process skew
# case (run 3 measured it). Output under $OUT: run_all_np4.tgz, summary.txt.
set -u
OUT="${OUT:-/tmp/out}"
NPS=4 NO_NCCL=1 BUDGET_S=470 CASES='^(workloads|ordering|pipeline|stream|fault)' \
  bash tests/torch/run_all.sh gpu-stage/lib/libconccl_nccl.so /tmp/ra4 >/tmp/ra4.txt 2>&1
echo "run_all NPS=4: rc=$?" | tee "$OUT/summary.txt"
grep -aE '^(PASS|FAIL|SKIP)|passed' /tmp/ra4.txt | cut -c1-260 | tee -a "$OUT/summary.txt" | tail -70
for f in /tmp/ra4/logs/*.log; do gzip -f "$f"; done
tar czf "$OUT/run_all_np4.tgz" -C /tmp ra4 ra4.txt
