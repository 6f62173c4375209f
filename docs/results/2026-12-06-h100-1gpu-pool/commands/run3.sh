#!/usr/bin/env bash
# Run 3 (2026-12-06, session 51), run from run 1 of ../../2026-12-06-h100-1gpu-pool-export on its stage (the graph
# memory lookup reads node types through the driver, and the test allocates the AllGather's output after a captured
# call): run 2's commands, with the drop-in's workloads given 150 s instead of 90 (run 2 stopped at `graphs`; compile,
# memory_return and mem_pool come after it).
set -u
OUT="${OUT:-/tmp/out}"
sed -e 's/BUDGET_S=90 timeout 100/BUDGET_S=150 timeout 160/' "$(dirname "${BASH_SOURCE[0]}")/run2.sh" > /tmp/run3-body.sh
exec bash /tmp/run3-body.sh
