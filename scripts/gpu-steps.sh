# Sourced by the GPU scripts that run test binaries under one wall-clock budget (gpu-check.sh, gpu-x2-first.sh).
# The caller sets: out (log folder), budget and start (seconds), gpus (GPUs the OS shows), summary=() and failed=().
# step NAME LIMIT_S CMD... then runs CMD with a timeout (the smaller of LIMIT_S and the budget left), logs to
# $out/NAME.log, and appends a summary line (and NAME to `failed` when it did not pass). On a machine with GPUs a
# gtest binary that ran no test or skipped every test has failed: one that cannot see the GPU must not read as PASS.
linebuf=""
command -v stdbuf >/dev/null && linebuf="stdbuf -oL -eL"
remaining() { echo $((budget - ($(date +%s) - start))); }
step() {
  local name="$1" limit="$2"
  shift 2
  local left
  left="$(remaining)"
  if [ "$left" -lt 15 ]; then
    summary+=("$(printf '%-34s NOT RUN (budget spent)' "$name")")
    failed+=("$name(not run)")
    return
  fi
  [ "$limit" -gt "$left" ] && limit="$left"
  local t0 rc
  t0="$(date +%s)"
  # Line-buffered, so that the log of a test killed by the timeout still shows where it was.
  timeout --signal=TERM --kill-after=10 "$limit" $linebuf "$@" >"$out/$name.log" 2>&1
  rc=$?
  local secs=$(($(date +%s) - t0))
  local verdict="PASS"
  [ "$rc" -ne 0 ] && verdict="FAIL(rc=$rc)"
  [ "$rc" -eq 124 ] && verdict="TIMEOUT(${limit}s)"
  local counts
  # (awk: a binary run with --gtest_repeat prints the same count lines once per run; list each once)
  counts="$(grep -E '^\[  (PASSED|FAILED|SKIPPED) +\]' "$out/$name.log" | sed -E 's/\[ +([A-Z]+) +\] ([0-9]+) tests?.*/\1=\2/' |
            awk '!seen[$0]++' | tr '\n' ' ')"
  # A gtest binary on a machine with GPUs: no test run, or every test skipped, is a failure.
  if [ "$verdict" = PASS ] && [ "$gpus" -gt 0 ] && grep -qE '^\[==========\] [0-9]+ tests? from' "$out/$name.log"; then
    local passed skipped
    passed="$(grep -E '^\[  PASSED  \] [0-9]+' "$out/$name.log" | tail -1 | sed -E 's/[^0-9]*([0-9]+).*/\1/')"
    skipped="$(grep -E '^\[  SKIPPED \] [0-9]+' "$out/$name.log" | tail -1 | sed -E 's/[^0-9]*([0-9]+).*/\1/')"
    if [ "${passed:-0}" -eq 0 ]; then
      if [ "${skipped:-0}" -gt 0 ]; then verdict="FAIL(all skipped)"; else verdict="FAIL(no test ran)"; fi
    fi
  fi
  [ "$verdict" != PASS ] && failed+=("$name")
  summary+=("$(printf '%-34s %-16s %4ss %s' "$name" "$verdict" "$secs" "$counts")")
}
