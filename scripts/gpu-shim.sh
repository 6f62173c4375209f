#!/usr/bin/env bash
# Issue 14 on the GPU machine: nccl-tests and PyTorch (torch.distributed's NCCL backend, FSDP2) run unchanged through
# the conccl NCCL shim (LD_PRELOAD of libconccl_nccl.so), beside plain NCCL where plain NCCL can run (>= 2 GPUs: it
# refuses ranks that share a GPU). One command, bounded in time, every raw log in one tarball under $OUT.
#
# Prepare on the CPU machine (gpu-build.sh empties gpu-stage/, so nccl-tests after it):
#   TARGETS="conccl_nccl_shim test_gpu_nccl_shim" scripts/gpu-build.sh && scripts/build-nccl-tests.sh <nccl-tests src>
# Run from the repository root on the GPU machine (carry gpu-stage):
#   bash scripts/gpu-shim.sh
# Env: OUT (default ./gpu-shim-out), BUDGET_S (total seconds, default 540: stays under one 600 s device call),
#      PHASES (default "gtest,ncclt,torch,fsdp"), MAX_BYTES (nccl-tests -e, default 64M; e.g. 1G if time permits),
#      ALLOPS_MAX_BYTES (-e of the -o all runs, default 4M), NT_ITERS / NT_WARMUP (-n / -w, default 10 / 3),
#      NP (torch processes, default max(G, 2)),
#      FSDP_STEPS (default 60), PY (default /opt/torch/.venv/bin/python), NCCL_LIB (the real NCCL's directory),
#      SHIM (default gpu-stage/lib/libconccl_nccl.so).
# Exit status: 0 when every step that ran passed; 1 otherwise (a step that could not run for lack of a staged file
# counts as failed; a step skipped for a stated reason, e.g. plain NCCL on one GPU, does not).
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
OUT="${OUT:-$root/gpu-shim-out}"
PY="${PY:-/opt/torch/.venv/bin/python}"
NCCL_LIB="${NCCL_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}"
SHIM="${SHIM:-$root/gpu-stage/lib/libconccl_nccl.so}"
BUDGET_S="${BUDGET_S:-540}"
PHASES="${PHASES:-gtest,ncclt,torch,fsdp}"
MAX_BYTES="${MAX_BYTES:-64M}"
ALLOPS_MAX_BYTES="${ALLOPS_MAX_BYTES:-4M}"
NT_ITERS="${NT_ITERS:-10}"
NT_WARMUP="${NT_WARMUP:-3}"
FSDP_STEPS="${FSDP_STEPS:-60}"
start="$(date +%s)"
mkdir -p "$OUT"
work="$(mktemp -d)"
logs="$work/logs"
mkdir -p "$logs"
results="$work/results.tsv"
: >"$results"

# record NAME STATUS SECONDS NOTE: one line of the summary (STATUS: PASS, FAIL, SKIP).
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results"; echo "[$2] $1 (${3}s) $4"; }
has_phase() { [[ ",$PHASES," == *",$1,"* ]]; }

# bounded NAME LIMIT CMD...: runs CMD with its output in logs/NAME.log, bounded by LIMIT and by what is left of the
# budget. Sets RC (124 = timed out) and SECS; returns 1 (without running) when the budget is spent.
bounded() {
  local name="$1" limit="$2"
  shift 2
  local left=$((start + BUDGET_S - $(date +%s)))
  if [ "$left" -lt 20 ]; then
    record "$name" SKIP 0 "time budget spent (BUDGET_S=$BUDGET_S)"
    return 1
  fi
  [ "$limit" -gt $((left - 10)) ] && limit=$((left - 10))
  local t0
  t0="$(date +%s)"
  timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
  RC=$?
  SECS=$(($(date +%s) - t0))
  [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ] && echo "TIMED OUT after ${limit}s" >>"$logs/$name.log"
  return 0
}

# How many communicators of a log took each path (the shim prints one line per communicator, always).
paths_of() {
  local c n
  c="$(grep -c 'conccl-shim: .* -> conccl (' "$1" 2>/dev/null)"
  n="$(grep -c 'conccl-shim: .* -> NCCL (' "$1" 2>/dev/null)"
  echo "comms: ${c:-0} conccl, ${n:-0} NCCL"
}
# The first errors a failed Python run printed (not torchrun's own ChildFailedError wrapper).
why_failed() {
  grep -E 'MISMATCH|TIMED OUT|no CUDA device|(Error|Exception)[:(]|NCCL (WARN|error)|conccl-shim: .*(fail|WARN)' "$1" 2>/dev/null |
    grep -v 'ChildFailedError\|elastic/multiprocessing' | head -3 | cut -c1-300 | tr '\n' ' '
}
conccl_comms() { grep -c 'conccl-shim: .* -> conccl (' "$1" 2>/dev/null || true; }

shim_env=(env LD_PRELOAD="$SHIM" CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2"
          LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}")
nccl_env=(env LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}")

# ---------------------------------------------------------------------------------------------------------------
G="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
[ "${G:-0}" -ge 1 ] || G="$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
NP="${NP:-$((G >= 2 ? G : 2))}"
{
  echo "date: $(date -u +%FT%TZ)  GPUs: $G  torch processes: $NP  budget: ${BUDGET_S}s  phases: $PHASES"
  nvidia-smi -L 2>&1
  echo "shim: $SHIM ($(sha256sum "$SHIM" 2>/dev/null | cut -c1-16))"
  echo "real NCCL: $(ls "$NCCL_LIB"/libnccl.so* 2>&1 | tr '\n' ' ')"
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())' 2>&1
  git -C "$root" log --oneline -1 2>/dev/null
} | tee "$logs/environment.txt"
if [ "$G" -lt 1 ]; then
  record preflight FAIL 0 "no GPU visible"
fi
if [ ! -f "$SHIM" ]; then
  record preflight FAIL 0 "no shim at $SHIM: run TARGETS=\"conccl_nccl_shim test_gpu_nccl_shim\" scripts/gpu-build.sh, carry gpu-stage"
  PHASES=""
fi

# ---------------------------------------------------------------------------------------------------------------
# The shim's device paths alone (tests/nccl/test_gpu_nccl_shim.cc): PreMulSum kernel bit-exact, in graphs, split.
run_gtest() {
  local bin="$root/gpu-stage/bin/test_gpu_nccl_shim"
  if [ ! -x "$bin" ]; then
    record gtest-nccl-shim FAIL 0 "no $bin: TARGETS=\"conccl_nccl_shim test_gpu_nccl_shim\" scripts/gpu-build.sh"
    return
  fi
  bounded gtest-nccl-shim 180 env CONCCL_NCCL_SHIM_PATH="$SHIM" CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" "$bin" ||
    return
  local status=PASS
  [ "$RC" -ne 0 ] && status=FAIL
  record gtest-nccl-shim "$status" "$SECS" "$(grep -hE '^\[  (PASSED|SKIPPED) *\] [0-9]+ test|^\[  FAILED  \] [A-Z]' \
    "$logs/gtest-nccl-shim.log" | sort -u | tr '\n' ' ' | cut -c1-400)"
}

# ---------------------------------------------------------------------------------------------------------------
# nccl-tests: every *_perf, -c 1 (data checked), through the shim and (>= 2 GPUs) with plain NCCL.
nt_check() {  # LOG -> "rows R wrong W busbw B"; status 0 when rows > 0, no wrong value and nccl-tests said OK
  awk '
    /Out of bounds values *: *0 OK/ { ok = 1 }
    /Avg bus bandwidth/ { split($0, a, ":"); split(a[2], b, " "); bw = b[1] }
    $1 ~ /^[0-9]+$/ && NF >= 13 {
      rows++
      if ($9 != "0" && $9 != "N/A") wrong++
      if ($13 != "0" && $13 != "N/A") wrong++
    }
    END { printf "rows %d wrong %d busbw %s", rows, wrong, bw == "" ? "?" : bw; exit !(ok && rows > 0 && wrong == 0) }
  ' "$1"
}
run_nccl_tests() {
  local tarball="$root/gpu-stage/nccl-tests.tar.xz"
  if [ ! -f "$tarball" ]; then
    record nccl-tests FAIL 0 "no $tarball: run scripts/build-nccl-tests.sh after gpu-build.sh"
    return
  fi
  tar -xJf "$tarball" -C "$work" || { record nccl-tests FAIL 0 "cannot unpack $tarball"; return; }
  local common=(-b 8 -e "$MAX_BYTES" -f 4 -c 1 -n "$NT_ITERS" -w "$NT_WARMUP")
  [ "$G" -lt 2 ] && record "nccl-tests -t $G" SKIP 0 "-t N needs N GPUs (one thread per GPU); one GPU here"
  [ "$G" -lt 2 ] && record "nccl-tests plain NCCL" SKIP 0 "one GPU: only one-rank communicators (-g 1), run through the shim"
  local timeouts=0
  for bin in "$work"/nccl-tests/*_perf; do
    local t
    t="$(basename "$bin" _perf)"
    local modes=("shim-g$G:-g $G" "shim-g$G-graph:-g $G -G 1")
    # Every op of the reductions, ncclRedOpCreatePreMulSum ("mulsum") included, checked by nccl-tests' own data;
    # smaller sizes: -o all runs each size six times.
    case "$t" in all_reduce | reduce_scatter | reduce) modes+=("shim-g$G-allops:-g $G -o all -e $ALLOPS_MAX_BYTES") ;; esac
    [ "$G" -ge 2 ] && modes+=("shim-t$G:-t $G -g 1" "nccl-g$G:-g $G" "nccl-t$G:-t $G -g 1")
    for m in "${modes[@]}"; do
      local name="nt-$t-${m%%:*}" args="${m#*:}" envv=("${shim_env[@]}")
      [[ "$name" == *-nccl-* ]] && envv=("${nccl_env[@]}")
      if [ "$timeouts" -ge 2 ]; then
        record "$name" SKIP 0 "two nccl-tests runs timed out already: the rest of the budget goes to the other phases"
        continue
      fi
      # shellcheck disable=SC2086
      bounded "$name" 60 "${envv[@]}" "$bin" "${common[@]}" $args || return
      [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ] && timeouts=$((timeouts + 1))
      local verdict status=PASS
      verdict="$(nt_check "$logs/$name.log")" || status=FAIL
      [ "$RC" -ne 0 ] && status=FAIL && verdict="rc $RC; $verdict"
      if [[ "$name" == *-shim-* ]]; then
        verdict="$verdict; $(paths_of "$logs/$name.log")"
        [ "$(conccl_comms "$logs/$name.log")" -ge 1 ] || { status=FAIL; verdict="$verdict (no conccl communicator)"; }
      fi
      record "$name" "$status" "$SECS" "$verdict"
    done
  done
}

# ---------------------------------------------------------------------------------------------------------------
# torch.distributed collectives (tests/torch/shim_collectives.py), NP processes (sharing GPUs when NP > G).
torchrun=("$PY" -m torch.distributed.run --standalone --nproc-per-node "$NP")
run_torch() {
  local name="torch-collectives-shim"
  if bounded "$name" 240 "${shim_env[@]}" "${torchrun[@]}" tests/torch/shim_collectives.py --expect-path conccl; then
    local status=PASS note
    note="$(grep -h '\] \(OK\|FAILED\):' "$logs/$name.log" | head -"$NP" | sed 's/^\[rank \([0-9]*\)\] /r\1 /' | tr '\n' ' ')"
    [ "$RC" -ne 0 ] && status=FAIL && note="rc $RC; $note; $(why_failed "$logs/$name.log")"
    [ "$(conccl_comms "$logs/$name.log")" -ge 1 ] || { status=FAIL; note="$note (no conccl communicator)"; }
    record "$name" "$status" "$SECS" "$note; $(paths_of "$logs/$name.log")"
  fi
  if [ "$G" -lt 2 ]; then
    record torch-collectives-nccl SKIP 0 "one GPU: plain NCCL refuses $NP ranks on one GPU"
    return
  fi
  name="torch-collectives-nccl"
  if bounded "$name" 240 "${nccl_env[@]}" "${torchrun[@]}" tests/torch/shim_collectives.py --expect-path NCCL; then
    local status=PASS note
    note="$(grep -h '\] \(OK\|FAILED\):' "$logs/$name.log" | head -"$NP" | sed 's/^\[rank \([0-9]*\)\] /r\1 /' | tr '\n' ' ')"
    [ "$RC" -ne 0 ] && status=FAIL && note="rc $RC; $note; $(why_failed "$logs/$name.log")"
    record "$name" "$status" "$SECS" "$note"
  fi
}

# ---------------------------------------------------------------------------------------------------------------
# FSDP2 training (tests/torch/shim_fsdp2.py): the shim vs the single-process reference of the same global batch,
# and vs plain NCCL on >= 2 GPUs; with ReduceOp.AVG (default) and with a divide factor (PreMulSum reduce-scatter).
fsdp_run() {  # NAME ENV-ARRAY-NAME EXTRA-ARGS...
  local name="$1" envname="$2"
  shift 2
  local -n envref="$envname"
  bounded "$name" 180 "${envref[@]}" "${torchrun[@]}" tests/torch/shim_fsdp2.py --steps "$FSDP_STEPS" \
    --out "$work/$name.json" "$@" || return 1
  local status=PASS note
  note="$(grep -h '^fsdp2:' "$logs/$name.log" | head -1)"
  [ "$RC" -ne 0 ] || [ ! -s "$work/$name.json" ] && status=FAIL && note="rc $RC; $(why_failed "$logs/$name.log")"
  if [ "$envname" = shim_env ]; then
    [ "$(conccl_comms "$logs/$name.log")" -ge 1 ] || { status=FAIL; note="$note (no conccl communicator)"; }
    note="$note; $(paths_of "$logs/$name.log")"
  fi
  record "$name" "$status" "$SECS" "$note"
}
fsdp_compare() {  # BASELINE CANDIDATE
  local name="compare-$1-vs-$2"
  if [ ! -s "$work/$1.json" ] || [ ! -s "$work/$2.json" ]; then
    record "$name" FAIL 0 "missing $1.json or $2.json (see their logs)"
    return
  fi
  bounded "$name" 30 "$PY" tests/torch/compare_losses.py "$work/$1.json" "$work/$2.json" || return
  local status=PASS
  [ "$RC" -ne 0 ] && status=FAIL
  record "$name" "$status" "$SECS" "$(grep -h '^compare\|^step_time_median\|^FAIL:' "$logs/$name.log" | sed 's/^compare [^(]*//' | tr '\n' ' ')"
}
run_fsdp() {
  local factor=$((2 * NP))
  fsdp_run fsdp-shim shim_env
  fsdp_run fsdp-shim-premul shim_env --divide-factor "$factor"
  bounded fsdp-reference 180 "$PY" tests/torch/shim_fsdp2.py --reference --world "$NP" --steps "$FSDP_STEPS" \
    --out "$work/fsdp-reference.json" && record fsdp-reference "$([ "$RC" -eq 0 ] && echo PASS || echo FAIL)" "$SECS" \
    "$(grep -h '^reference:' "$logs/fsdp-reference.log" | head -1)"
  bounded fsdp-reference-premul 180 "$PY" tests/torch/shim_fsdp2.py --reference --world "$NP" --steps "$FSDP_STEPS" \
    --divide-factor "$factor" --out "$work/fsdp-reference-premul.json" &&
    record fsdp-reference-premul "$([ "$RC" -eq 0 ] && echo PASS || echo FAIL)" "$SECS" \
      "$(grep -h '^reference:' "$logs/fsdp-reference-premul.log" | head -1)"
  fsdp_compare fsdp-reference fsdp-shim
  fsdp_compare fsdp-reference-premul fsdp-shim-premul
  if [ "$G" -lt 2 ]; then
    record fsdp-nccl SKIP 0 "one GPU: plain NCCL refuses $NP ranks on one GPU; compared with the reference instead"
    return
  fi
  fsdp_run fsdp-nccl nccl_env
  fsdp_run fsdp-nccl-premul nccl_env --divide-factor "$factor"
  fsdp_compare fsdp-nccl fsdp-shim
  fsdp_compare fsdp-nccl-premul fsdp-shim-premul
  fsdp_compare fsdp-reference fsdp-nccl
}

has_phase gtest && run_gtest
has_phase ncclt && run_nccl_tests
has_phase torch && run_torch
has_phase fsdp && run_fsdp

# ---------------------------------------------------------------------------------------------------------------
cp "$work"/*.json "$logs/" 2>/dev/null
cp "$results" "$logs/results.tsv"
total=$(($(date +%s) - start))
failed="$(awk -F'\t' '$2 == "FAIL"' "$results" | wc -l)"
{
  echo "== gpu-shim summary: $G GPU(s), $NP torch processes, ${total}s of ${BUDGET_S}s =="
  awk -F'\t' '{ printf "%-4s %-34s %5ss  %s\n", $2, $1, $3, $4 }' "$results"
  # nccl-tests side by side: average bus bandwidth (GB/s) over the sizes, shim vs plain NCCL (>= 2 GPUs).
  awk -F'\t' -v g="$G" '
    $1 ~ /^nt-/ { name = $1; sub(/^nt-/, "", name); split($4, a, "busbw "); split(a[2], b, "[; ]"); bw[name] = b[1] }
    END {
      for (k in bw) if (k ~ ("-shim-g" g "$")) {
        t = k; sub("-shim-g" g "$", "", t)
        printf "busbw %-15s shim -g %s: %-8s graph: %-8s", t, g, bw[k], bw[t "-shim-g" g "-graph"]
        if ((t "-nccl-g" g) in bw) printf "  NCCL -g %s: %-8s  shim -t: %-8s NCCL -t: %s", g, bw[t "-nccl-g" g], bw[t "-shim-t" g], bw[t "-nccl-t" g]
        printf "\n"
      }
    }' "$results" | sort
  awk -F'\t' '{ n[$2]++ } END { printf "PASS %d  FAIL %d  SKIP %d\n", n["PASS"], n["FAIL"], n["SKIP"] }' "$results"
} | tee "$OUT/gpu-shim-summary.txt"
tar -czf "$OUT/gpu-shim-logs.tgz" -C "$work" logs
echo "logs: $OUT/gpu-shim-logs.tgz"
rm -rf "$work"
[ "$failed" -eq 0 ]
