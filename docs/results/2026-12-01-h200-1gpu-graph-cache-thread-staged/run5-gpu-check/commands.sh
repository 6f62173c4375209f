#!/usr/bin/env bash
# Session 5, call 5 (one H200): every GPU test on HEAD (after the LocalClique changes), no bench, no sanitizer.
set -uo pipefail
source scripts/gpu-env.sh
OUT_DIR=$OUT
OUT=/tmp/check BUDGET_S=560 SKIP_BENCH=1 SKIP_SANITIZER=1 bash scripts/gpu-check.sh > $OUT_DIR/gpu-check.txt 2>&1
rc=$?
tail -45 $OUT_DIR/gpu-check.txt
tar czf $OUT_DIR/check-logs.tgz -C /tmp check
exit $rc
