#!/usr/bin/env bash
# run 1 (stage b49750a): the simulated nodes, before the fixes of the test tolerance and the whole-line logging
LIMIT=90 bash tests/nccl/run_simulated_nodes.sh; echo rc=$?; cut -c1-400 "$OUT/simulated-nodes/summary.txt" | head -60
