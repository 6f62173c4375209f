#!/usr/bin/env bash
# First call of the session: the launch-forms probe (probe-stage/launch_forms, one process, 64 MiB and 1 GiB), then
#   on an H200 the first shard of the multi-process suite (issue 24's run), on an H100 the skew case under expandable
#   segments with the host laps (the slow second round of all_to_all_single seen 2026-12-06).
source "$(dirname "$0")/common.sh"
card="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
t0=$SECONDS
timeout 240 probe-stage/launch_forms 21 3 >"$OUT/probe.log" 2>&1
say "probe: rc=$? ($((SECONDS - t0)) s)"
grep -aE "SUMMARY|FAIL|wrong|passed|not seen|failed" "$OUT/probe.log" | tee -a "$s"
case "$card" in
  *H200*)
    t0=$SECONDS
    MP_SHARD=1/3 OUT="$OUT/mp1" STAGE=gpu-stage BUDGET_S=330 bash scripts/gpu.sh mp-suite >"$OUT/mp1.log" 2>&1
    say "mp-suite 1/3: rc=$? ($((SECONDS - t0)) s)"
    tail -30 "$OUT/mp1/summary.txt" 2>/dev/null | cut -c1-220 | tee -a "$s" ;;
  *)
    torch_suite skew-laps 330 CASES=skew NPS=2 SKEW_ALLOCS=expandable CONCCL_HOST_LAPS=1 BUDGET_S=320 ;;
esac
pack
true
