#!/usr/bin/env bash
# The GPU suites not run since 2026-12-04 on this stage: test_gpu_ops_c_api (fused ops' C interface),
#   test_gpu_collectives, test_gpu_soak, while time is left.
source "$(dirname "$0")/common.sh"
for t in test_gpu_ops_c_api test_gpu_collectives test_gpu_soak; do
  left=$((570 - SECONDS))
  [ "$left" -gt 20 ] || { say "$t: not started (no time left)"; continue; }
  t0=$SECONDS
  ( cd gpu-stage/bin && timeout "$left" "./$t" ) >"$OUT/$t.log" 2>&1
  say "$t: rc=$? ($((SECONDS - t0)) s) $(grep -a -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test' "$OUT/$t.log" | tr '\n' ' ')"
  grep -a -E '^\[  FAILED  \] [A-Z]' "$OUT/$t.log" | sort -u | head -10 | tee -a "$s"
done
pack
true
