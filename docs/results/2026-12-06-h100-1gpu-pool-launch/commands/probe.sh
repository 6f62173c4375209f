#!/usr/bin/env bash
# Call 7 (2026-12-06, session 54): a probe (not part of the project: probe-stage/bounce_probe, its source kept outside the
#   repository as FACTS.md asks of probes) of the caller's host time of a pool-bounce call's launches in five forms, one
#   process: V0 a program graph (3 memory-operation nodes and a 4 KiB copy) + the done marker; V1 today's bounce (a
#   copy kernel launch, V0, a copy kernel launch); V2 one graph with the copy kernels as nodes set per call
#   (cudaGraphExecKernelNodeSetParams); V3 the same nodes constant, reading the call's pointers from a ring of
#   descriptors in pinned host memory indexed by a device counter; V4 one graph with the copies as memcpy nodes set per
#   call (cudaGraphExecMemcpyNodeSetParams1D). 64 MiB and 1 GiB, 200 calls each (synchronised every 16), twice. Each
#   form's result is checked (a call on fresh fills must move exactly its buffers).
set -u
OUT="${OUT:-/tmp/out}"
s="$OUT/summary.txt"
echo "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40)" | tee -a "$s"
for k in 1 2; do
  timeout 100 ./probe-stage/bounce_probe 200 2>&1 | tee -a "$s"
  echo "probe run $k rc=${PIPESTATUS[0]}" | tee -a "$s"
done
true
