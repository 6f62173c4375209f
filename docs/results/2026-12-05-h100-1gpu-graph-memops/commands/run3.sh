#!/usr/bin/env bash
# Run 3 (2026-12-05, session 48): what a kernel node costs a graph launch, alone and beside copies and memory
# operations (the probe, gpu-stage/memop_probe kernel).
set -u
OUT="${OUT:-/tmp/out}"
echo "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)" | tee "$OUT/summary.txt"
timeout 100 ./gpu-stage/memop_probe kernel 2>&1 | tee -a "$OUT/summary.txt"
