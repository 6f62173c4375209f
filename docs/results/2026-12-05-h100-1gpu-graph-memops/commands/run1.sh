#!/usr/bin/env bash
# Run 1 (2026-12-05, session 48), stage c7a487d: (a) a probe (not part of the project; gpu-stage/memop_probe, source
# outside the repository as FACTS.md asks of probes): CPU cost of cudaGraphLaunch and GPU time per replay for memory
# operations per op vs per node, 4-byte copy nodes, the staged one-shot AllReduce's sync pattern at 3 ranks in four
# forms, and the done marker separate vs folded into the last batch; (b) the H100 folder's unrun run7.sh
# (Send/Recv + size-mismatch message after the lazy descriptions; 3-process late-call laps without the tally's cost).
set -u
OUT="${OUT:-/tmp/out}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)"
timeout 120 ./gpu-stage/memop_probe > "$OUT/memop_probe.txt" 2>&1; say "probe rc=$?"
cat "$OUT/memop_probe.txt" | tee -a "$s"
mkdir -p "$OUT/run7"
OUT="$OUT/run7" timeout 200 bash docs/results/2026-12-05-h100-1gpu-mempool-laps/commands/run7.sh > /dev/null 2>&1
echo "--- run7" >> "$s"; cat "$OUT/run7/summary.txt" >> "$s"; tail -n +1 "$OUT/run7/summary.txt"
