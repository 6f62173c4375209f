#!/usr/bin/env bash
# Run 4 (one H200, 2026-12-04), from the repository root with .probe/ carried: the CPU cost of one cudaGraphLaunch by
# node count and kind (memcpy nodes; cuStreamWriteValue32 + cuStreamWaitValue32 nodes; the two in one
# cuStreamBatchMemOp node; both; on two streams), after a sync and back to back, beside issuing the same ops eagerly.
# The probe's source is not part of the project (FACTS.md's rule for probes); its output is graph_probe.txt.
./.probe/graph_probe 2>&1 | tee $OUT/graph_probe.txt
