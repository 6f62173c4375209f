#!/usr/bin/env bash
# The GPU-machine runner: every job conccl runs on a GPU machine, as phases of one script (docs/dev/gpu-runner.md).
#
#   HERE (CPU machine):  scripts/gpu-build.sh [&& scripts/build-nccl-tests.sh <nccl-tests source>]
#   THERE (GPU machine, repo root, gpu-stage/ carried):  bash scripts/gpu.sh <phase...>
#   Anywhere:  bash scripts/gpu.sh --list            what each phase runs, what it needs, about how long it takes
#              bash scripts/gpu.sh --dry-run PHASE   the commands a phase would run (NGPUS=N to plan for N GPUs)
#
# Output: $OUT/<phase>/<step>.log and the phase's result files; $OUT/machine.txt; $OUT/summary.txt, printed last.
# The device tool returns at most 8 files from $OUT: by default the logs of each phase are packed into
# $OUT/<phase>/logs.tgz, and everything but the summary into $OUT/results.tgz when that is still too many (PACK).
# Exit status: 0 when every step that ran passed (a step skipped for a stated reason is not a failure).
#
# Common environment: OUT (default ./gpu-out), STAGE (gpu-stage), BUDGET_S (wall-clock budget of the whole run,
# default 560: one device command may run 600 s), NGPUS (override the GPU count), PY (the Python with torch,
# default /opt/torch/.venv/bin/python), NCCL_LIB (the real NCCL's directory), PACK (logs | all | none).
# Each phase's own variables: --list.
set -uo pipefail

root="$PWD"
stage="${STAGE:-gpu-stage}"
bin="$stage/bin"
lib="$stage/lib"
OUT="${OUT:-$root/gpu-out}"
PY="${PY:-/opt/torch/.venv/bin/python}"
NCCL_LIB="${NCCL_LIB:-/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib}"
budget="${BUDGET_S:-560}"
dry=0
start="$(date +%s)"

# ------------------------------------------------------------------------------------------------------------------
# One line per phase (a trailing backslash continues it): name|needs|about how long|its variables|what it runs.
phase_table() {
  cat <<EOF
tests|1+ GPUs|4-9 min|GTEST_FILTER, SOAK_CALLS (2000)|every staged GPU test binary (both paths, no-hang, short soak, \
multi-process); with 2+ GPUs also CUDA_DEVICE_MAX_CONNECTIONS=1
sanitize|1+ GPUs|2-6 min||compute-sanitizer memcheck / racecheck: executor, 1-rank collectives, call order, chunked \
calls; MultiGpu.* with 2+ GPUs
soak|1+ GPUs|1-2 min|SOAK_LONG_CALLS (100000)|the long soak: SOAK_LONG_CALLS copy-engine AllReduce calls on 3 ranks, \
grouped and thread per rank; 2,000 calls with the graph cache off for comparison
kernel|1+ GPUs|2-4 min|KERNEL_ARGS, PROBE_ARGS|conccl-kernel-bench: reduction kernel (fan-in 2-8) and per-call \
latency; read / write / flag / TMA probes (peer probe with 2+ GPUs); latency with the copy-engine path only
bench|1+ GPUs|3-8 min|BENCH_MAX (512M), LANES_SWEEP|conccl-bench: with 2+ GPUs the copy-engine probe and conccl vs \
NCCL vs NCCL-CE across every GPU; on one GPU ranks sharing it (correctness and host time only)
sweep|2+ GPUs|5-6 min|MODES (g t), COLLS, SMALL_MAX (64M), SWEEP_MAX (4G), ITERS, NCCL_TESTS (1)|the full table: \
nine collectives 8 B..SWEEP_MAX, -g N and -t N, conccl / NCCL / nccl-tests (needs gpu-stage/nccl-tests.tar.xz)
tune|2+ GPUs|5-8 min|TUNE (ss mc lanes small ctas)|the sweeps behind the per-GPU-count defaults \
(docs/tuning.md) and the table row they give; peer reads vs exchange, reduction CTAs
host-cost|1+ GPUs|2-5 min|VARIANTS (cache-on= cache-off=CONCCL_GRAPH_CACHE:0), MODES, COLLS, MINB, MAXB, ITERS, \
DEVICES|host time per call (host_us) A/B: conccl-bench under each of VARIANTS, -g and -t, NCCL beside where each \
rank has a GPU
mp-suite|1+ GPUs|3-4 min a shard|MP_SHARD (all; or k/n)|test_gpu_multiprocess whole (2-4 processes a test), in \
gtest shards of MP_SHARDS (3): MP_SHARD=k/n runs the k-th of n, one device call each (the suite took 529 s on one \
H200 and about 670 s on an H100: no single call holds it); all = every shard in turn while the budget lasts
multiproc|1+ GPUs|2-4 min||one process per rank: the example with 2 and 4 processes, the PyTorch snippet, nothing \
left in /dev/shm, staged-call and graph-cache host time
shim|1+ GPUs|5-9 min|SHIM_PHASES (gtest,ncclt,torch,fsdp), MAX_BYTES, ALLOPS_MAX_BYTES, NT_ITERS, NT_WARMUP, NP, \
FSDP_STEPS|the NCCL drop-in: its GPU test, nccl-tests through it (and plain NCCL with 2+ GPUs), torch.distributed \
collectives, FSDP2 vs the single-process reference
c3|1+ GPUs|3-8 min|C3_RANKS, C3_ROUNDS (5), C3_ITERS (10), C3_GRID, C3_CAL (skip calibration), C3_EXTRA|conccl-c3: \
with 2+ GPUs the calibration then the built-in grid (every strategy, auto); on one GPU the SM sweep and the 1-rank \
grid
tp-bench|1+ GPUs|2-5 min|TP_ARGS, TP_CHECK_TOKENS (2048)|conccl-tp-bench: --check at one token count, then the table \
(LLaMA-3 MLP shapes, every GPU one rank)
fused|1+ GPUs|2-7 min|FUSED_BENCH_ARGS|the fused ops from PyTorch: the C interface test, \
examples/torch/fused_ops.py, PyTorch's own fused ops vs serial NCCL (2+ GPUs)
torch|1+ GPUs|see run_all.sh||tests/torch/run_all.sh, the PyTorch suite, when it exists
vmm|1+ GPUs|4-9 min|VMM_NPS (2 4)|VMM memory shared across processes (CONCCL_VMM_EXPORT=1): the multi-process scenarios (shareable pieces that buffers cross, pieces replaced between rounds; and memory CUDA IPC cannot share, staged), then PyTorch's workloads through the drop-in with expandable segments exported
late|1+ GPUs|5-9 min|LATE_SKEW_CALLS (5)|host time per call with a peer 2 s late (issue 24 item 1): the C API \
test at the defaults, with calls up to 8 MiB routed (CONCCL_STAGED_MAX_BYTES=0), and with TRACE laps; the drop-in's \
skew case with and without TRACE; one line of laps per call kind in the notes
verify|1+ GPUs|6-9 min|VERIFY_NPS (2)|what was built without a GPU and not yet run (docs/dev/next-steps.md item 0): \
the VMM piece check, freed memory without further calls, a freed place used again at once, the scenarios the late-call and window changes touch, the \
late 1 MiB call with 3 processes (one shot), then PyTorch's workloads with expandable segments and the default allocator \
(memory_return again with TRACE if it fails)
capture|1+ GPUs|3-8 min|CAPTURE_ROUNDS (8)|CUDA graph capture beside conccl: what CUDA allows beside a global capture (test_gpu_capture_mode, test_gpu_capture_ipc); the unstaged reference scenario (3-4 processes) CAPTURE_ROUNDS times, stopping at the first failure; a peer killed during a graph replay; PyTorch's graph workloads through the drop-in
repro|1+ GPUs|1-2 min||developer: the fixed hazards reproduced with the fix off (the tests' *Repro.DISABLED_* \
cases: no queue claim, no call order): each test must FAIL
shim-diag|1+ GPUs|1-2 min|DIAG_NAME, DIAG_LIMIT (40), DIAG_STEPS (60), DIAG_ENV|developer: a stalled FSDP2 run \
through the drop-in, two ranks by hand, then thread states, backtraces, tracebacks
EOF
}
phase_names() { phase_table | cut -d"|" -f1; }

usage() {
  cat <<EOF
usage: bash scripts/gpu.sh [--list] [--dry-run] PHASE...   (from the repo root)
       'check' = tests sanitize
phases: $(phase_names | tr '\n' ' ')
EOF
}

list_phases() {
  local name needs time vars what
  printf '%-10s %-9s %-12s %s\n' phase needs time "what it runs [its variables]"
  while IFS='|' read -r name needs time vars what; do
    printf '%-10s %-9s %-12s %s%s\n' "$name" "$needs" "$time" "$what" "${vars:+ [$vars]}"
  done < <(phase_table)
  echo
  echo "One device command runs at most 10 minutes: give each call the phases that fit (e.g. 'tests', then"
  echo "'sanitize kernel', then 'bench c3'). The runner never starts a step past BUDGET_S (default 560 s)."
}

# ------------------------------------------------------------------------------------------------------------------
# Steps. run_bounded NAME LIMIT CMD... runs CMD into $pdir/NAME.log under a timeout (the smaller of LIMIT and the budget
# left); sets RC and SECS; returns 1 without running when the budget is spent or this is a dry run.
# record NAME VERDICT SECS NOTE adds one summary line. step NAME LIMIT CMD... = run_bounded + the default verdict.
results="$(mktemp)"
RC=0
SECS=0
failures=0
linebuf=()
command -v stdbuf >/dev/null && linebuf=(stdbuf -oL -eL)

record() {
  local name="$phase/$1" verdict="$2" secs="$3" note="${4:-}"
  printf '%-36s %-18s %5ss  %s\n' "$name" "$verdict" "$secs" "$note" >>"$results"
  printf '[%s] %s (%ss) %s\n' "$verdict" "$name" "$secs" "$note"
  case "$verdict" in PASS* | SKIP* | EXPECTED* | "NOT RUN (needs"*) ;; *) failures=$((failures + 1)) ;; esac
}

left_s() { echo $((budget - ($(date +%s) - start))); }

run_bounded() {
  local name="$1" limit="$2"
  shift 2
  if [ "$dry" = 1 ]; then
    printf '  %-30s (<= %4ss) %s\n' "$phase/$name" "$limit" "$(printf '%q ' "$@")"
    return 1
  fi
  local left
  left="$(left_s)"
  if [ "$left" -lt 20 ]; then
    record "$name" "NOT RUN (budget)" 0 "BUDGET_S=$budget spent"
    return 1
  fi
  [ "$limit" -gt $((left - 10)) ] && limit=$((left - 10))
  local t0
  t0="$(date +%s)"
  # Line-buffered, so that the log of a command killed by its timeout still shows where it was.
  timeout --signal=TERM --kill-after=10 "$limit" "${linebuf[@]}" "$@" >"$pdir/$name.log" 2>&1
  RC=$?
  SECS=$(($(date +%s) - t0))
  if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then echo "TIMED OUT after ${limit}s" >>"$pdir/$name.log"; fi
  return 0
}

# gtest_counts LOG: "PASSED=n SKIPPED=m FAILED=k" (each count line once: --gtest_repeat prints them per run).
gtest_counts() {
  grep -E '^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?' "$1" 2>/dev/null |
    sed -E 's/\[ +([A-Z]+) +\] ([0-9]+) tests?.*/\1=\2/' | awk '!seen[$0]++' | tr '\n' ' '
}

# The default verdict: the exit status; and on a machine with GPUs, a gtest binary that ran no test or skipped every
# test has failed (a binary that cannot see the GPU must not read as PASS).
verdict_of() {
  local log="$1" limit="$2" v=PASS
  [ "$RC" -ne 0 ] && v="FAIL(rc=$RC)"
  { [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; } && v="TIMEOUT(${limit}s)"
  if [ "$v" = PASS ] && [ "$ngpus" -gt 0 ] && grep -qE '^\[==========\] [0-9]+ tests? from' "$log"; then
    local passed skipped
    passed="$(grep -E '^\[  PASSED  \] [0-9]+' "$log" | tail -1 | sed -E 's/[^0-9]*([0-9]+).*/\1/')"
    skipped="$(grep -E '^\[  SKIPPED \] [0-9]+' "$log" | tail -1 | sed -E 's/[^0-9]*([0-9]+).*/\1/')"
    if [ "${passed:-0}" -eq 0 ]; then
      if [ "${skipped:-0}" -gt 0 ]; then v="FAIL(all skipped)"; else v="FAIL(no test ran)"; fi
    fi
  fi
  echo "$v"
}

step() {
  local name="$1" limit="$2"
  shift 2
  run_bounded "$name" "$limit" "$@" || return 0
  record "$name" "$(verdict_of "$pdir/$name.log" "$limit")" "$SECS" "$(gtest_counts "$pdir/$name.log")"
}

# expect_fail NAME LIMIT CMD...: a reproduction: passes when the command fails (or hangs into its timeout).
expect_fail() {
  local name="$1" limit="$2"
  shift 2
  run_bounded "$name" "$limit" "$@" || return 0
  if [ "$RC" -ne 0 ]; then record "$name" "EXPECTED FAIL" "$SECS" "rc=$RC: the switch reproduces the hazard"
  else record "$name" "FAIL(passed)" "$SECS" "expected a failure with the fix off"; fi
}

# have FILE: a staged file exists (always, in a dry run: the plan shows every step).
have() { [ "$dry" = 1 ] || [ -e "$1" ]; }
# need FILE NAME: records a failure naming how to stage FILE when it is missing.
need() {
  have "$1" && return 0
  record "$2" "FAIL(not staged)" 0 "no $1: run scripts/gpu-build.sh here, carry gpu-stage"
  return 1
}
skip() { record "$1" "SKIP" 0 "$2"; }
# say TEXT: a line for the summary's phase notes (not a step).
say() { [ "$dry" = 1 ] || echo "$phase: $*" >>"$notes"; }
notes="$(mktemp)"

# nccl-tests from gpu-stage/nccl-tests.tar.xz (scripts/build-nccl-tests.sh); sets nt_dir, empty when absent.
nt_dir=""
unpack_nccl_tests() {
  [ -n "$nt_dir" ] && return 0
  if [ "$dry" = 1 ]; then nt_dir="<nccl-tests>"; return 0; fi
  [ -f "$stage/nccl-tests.tar.xz" ] || return 1
  local d
  d="$(mktemp -d)"
  tar -xJf "$stage/nccl-tests.tar.xz" -C "$d" && nt_dir="$d/nccl-tests"
}

# ==================================================================================================================
# tests: every staged GPU test binary. Cheapest and most fundamental first, so a late hang costs the least.
phase_tests() {
  local filter=()
  [ -n "${GTEST_FILTER:-}" ] && filter=(--gtest_filter="$GTEST_FILTER")
  local soak="${SOAK_CALLS:-2000}" t limit
  local first=(test_gpu_executor:60 test_gpu_collectives:150 test_gpu_usage:90 test_gpu_graphs:200)
  for t in "${first[@]}"; do
    have "$bin/${t%%:*}" && step "${t%%:*}" "${t#*:}" "$bin/${t%%:*}" --gtest_brief=1 "${filter[@]}"
  done
  # The shared-GPU deadlock (20 fresh communicators x ranks {3,4,5}, thread per rank) and the watchdog.
  have "$bin/test_gpu_no_hang" && step test_gpu_no_hang 150 "$bin/test_gpu_no_hang" --gtest_brief=1 \
    --gtest_filter="${GTEST_FILTER:-NoHang.*:Watchdog.*}"
  have "$bin/test_gpu_soak" && step test_gpu_soak $((soak / 200 + 60)) env CONCCL_SOAK_CALLS="$soak" \
    "$bin/test_gpu_soak" --gtest_brief=1 "${filter[@]}"
  for t in $(test_binaries); do
    case "$t" in
      test_gpu_executor | test_gpu_collectives | test_gpu_usage | test_gpu_graphs | test_gpu_no_hang) continue ;;
      test_gpu_soak) continue ;;
    esac
    if [ "$t" = test_gpu_no_sm ] && [ "$ngpus" -lt 2 ]; then  # every test of it needs 2 GPUs
      record "$t" "NOT RUN (needs 2 GPUs)" 0 "$ngpus here"
      continue
    fi
    if [ "$t" = test_gpu_multiprocess ] && [ -z "${GTEST_FILTER:-}" ]; then
      skip "$t" "whole, it outlasts one device call: phase mp-suite runs it in shards"
      continue
    fi
    step "$t" 120 "$bin/$t" --gtest_brief=1 "${filter[@]}"
  done
  # CUDA_DEVICE_MAX_CONNECTIONS=1 (what Megatron-LM and TransformerEngine set): one rank per GPU must work, in one
  # process and with a process per GPU.
  if [ "$ngpus" -ge 2 ]; then
    step collectives-connections-1 120 env CUDA_DEVICE_MAX_CONNECTIONS=1 "$bin/test_gpu_collectives" \
      --gtest_brief=1 --gtest_filter='MultiGpu.*'
    step multiprocess-connections-1 120 env CUDA_DEVICE_MAX_CONNECTIONS=1 "$bin/test_gpu_multiprocess" \
      --gtest_brief=1 --gtest_filter='Ranks/MultiProcess.*/0'
  fi
  local log
  for log in "$pdir"/test_gpu_*.log; do
    [ -f "$log" ] || continue
    grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | head -8 | sed "s|^|$(basename "$log" .log): |" >>"$notes"
  done
  [ -f "$pdir/test_gpu_soak.log" ] && grep -E '^soak ' "$pdir/test_gpu_soak.log" | sed 's/^/tests: /' >>"$notes"
}

# The staged GPU test binaries (in a dry run without a stage: the sources that gpu-build.sh would build).
test_binaries() {
  local f
  if [ -d "$bin" ]; then
    for f in "$bin"/test_gpu_*; do [ -x "$f" ] && basename "$f"; done
  else
    for f in tests/gpu/test_gpu_*.c[cu] tests/nccl/test_gpu_*.cc tests/ops/test_gpu_*.cc; do
      [ -e "$f" ] && basename "${f%.*}"
    done
  fi
}

# ==================================================================================================================
phase_sanitize() {
  if [ "$dry" != 1 ] && ! command -v compute-sanitizer >/dev/null; then
    skip compute-sanitizer "not on PATH"
    return
  fi
  local ms=(compute-sanitizer --tool memcheck --error-exitcode 9)
  local rs=(compute-sanitizer --tool racecheck --error-exitcode 9)
  # Tests whose ranks are enqueued signaller-first: the sanitizer may serialise streams, and a Wait enqueued before
  # the Signal it needs would never finish.
  local short='Executor.LanesSignalsWaitsAndReduce:Executor.CheckBufferMessages:ReduceKernel.RejectsTooManyInputsAndFp8'
  step memcheck-executor 60 "${ms[@]}" "$bin/test_gpu_executor" --gtest_brief=1 --gtest_filter="$short"
  step memcheck-collectives 90 "${ms[@]}" "$bin/test_gpu_collectives" --gtest_brief=1 \
    --gtest_filter='*/Collectives.*/*_1ranks_*'
  step racecheck-executor 45 "${rs[@]}" "$bin/test_gpu_executor" --gtest_brief=1 \
    --gtest_filter=Executor.LanesSignalsWaitsAndReduce
  have "$bin/test_gpu_call_order" && step memcheck-call-order 90 "${ms[@]}" "$bin/test_gpu_call_order" --gtest_brief=1
  have "$bin/test_gpu_chunked_all_gather" && step memcheck-chunked-all-gather 90 "${ms[@]}" \
    "$bin/test_gpu_chunked_all_gather" --gtest_brief=1
  if have "$bin/test_gpu_chunked_reduce_scatter"; then
    step memcheck-chunked-reduce-scatter 90 "${ms[@]}" "$bin/test_gpu_chunked_reduce_scatter" --gtest_brief=1
    step racecheck-chunked-reduce-scatter 120 "${rs[@]}" "$bin/test_gpu_chunked_reduce_scatter" --gtest_brief=1
  fi
  if [ "$ngpus" -ge 2 ]; then
    # Every collective, every path, ranks on distinct GPUs. API return codes are not memory errors:
    # cudaDeviceEnablePeerAccess answers cudaErrorPeerAccessAlreadyEnabled to a second communicator, which the
    # executor expects and clears.
    step memcheck-multigpu 150 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
      "$bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
    step racecheck-multigpu 150 "${rs[@]}" "$bin/test_gpu_collectives" --gtest_brief=1 --gtest_filter='MultiGpu.*'
  fi
  local log
  for log in "$pdir"/*check-*.log; do
    [ -f "$log" ] || continue
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1 | sed "s|^|$(basename "$log" .log): |" >>"$notes"
  done
}

# ==================================================================================================================
phase_soak() {
  local n="${SOAK_LONG_CALLS:-100000}"
  step "soak-$n" $((n / 2000 + 60)) env CONCCL_SOAK_CALLS="$n" "$bin/test_gpu_soak" --gtest_brief=1
  step soak-cache-off 120 env CONCCL_SOAK_CALLS=2000 CONCCL_GRAPH_CACHE=0 "$bin/test_gpu_soak" --gtest_brief=1
  local log
  for log in "$pdir"/soak-*.log; do
    [ -f "$log" ] && grep -hE '^soak |us/call' "$log" | sed "s|^|$(basename "$log" .log): |" >>"$notes"
  done
}

# ==================================================================================================================
phase_kernel() {
  local kb="$bin/conccl-kernel-bench"
  need "$kb" conccl-kernel-bench || return
  # shellcheck disable=SC2086  # the ARGS variables are word lists
  step kernel-bench 150 "$kb" ${KERNEL_ARGS:--g 2 -n 50}
  local probes="--no-latency --read-probe --write-probe --flag-probe --tma-reduce-probe --runs 5"
  [ "$ngpus" -ge 2 ] && probes="$probes --peer-probe"
  # shellcheck disable=SC2086
  step kernel-probes 240 "$kb" --no-reduce ${PROBE_ARGS:-$probes}
  step latency-copy-engine-only 120 env CONCCL_SMALL_MESSAGE_BYTES=0 "$kb" --no-reduce -g 2 -n 30
  [ "$dry" = 1 ] && return
  grep -h '^#json' "$pdir"/kernel-bench.log "$pdir"/kernel-probes.log 2>/dev/null | sed 's/^#json //' \
    >"$pdir/kernel-bench.jsonl"
  { grep -E '^(bf16|fp32) +(1|4|8|132) ' "$pdir/kernel-bench.log"
    grep -E '^(AllReduce|AllGather|ReduceScatter) +(8|8192|1048576) ' "$pdir/kernel-bench.log"
    grep -hE '^(flag-probe|local|peer) |contention' "$pdir/kernel-probes.log"
  } 2>/dev/null | sed 's/^/kernel: /' >>"$notes"
}

# ==================================================================================================================
phase_bench() {
  local cb="$bin/conccl-bench"
  need "$cb" conccl-bench || return
  if [ "$ngpus" -ge 2 ]; then
    [ "$dry" = 1 ] || nvidia-smi topo -m >"$pdir/topo.txt" 2>&1
    # The copy-engine proof: a peer copy beside a kernel holding every SM of both GPUs, against a same-device copy.
    have "$bin/conccl-ce-probe" && step ce-probe 90 "$bin/conccl-ce-probe" 1073741824 200
    local common=(-g "$ngpus" -n 20 -w 5) lanes
    for lanes in ${LANES_SWEEP:-}; do
      step "bench-lanes$lanes" 120 "$cb" --backend conccl "${common[@]}" -b 1M -e 256M -f 16 \
        --coll all_gather,reduce_scatter --lanes "$lanes" --json "$pdir/bench-lanes$lanes.jsonl"
    done
    step bench-main 300 "$cb" --backend conccl,nccl,nccl-ce "${common[@]}" -b 8 -e "${BENCH_MAX:-512M}" -f 4 \
      --coll all_gather,all_to_all,reduce_scatter,all_reduce --json "$pdir/bench-main.jsonl"
    step bench-rest 150 "$cb" --backend conccl,nccl "${common[@]}" -b 8 -e 64M -f 8 \
      --coll broadcast,reduce,gather,scatter,sendrecv --json "$pdir/bench-rest.jsonl"
  else
    # One GPU: ranks share it, so same-device copies run on SMs: correctness and host time, not copy-engine figures.
    # NCCL refuses two ranks on one GPU, so it runs one-rank communicators beside conccl's.
    step bench-1gpu 150 "$cb" --backend conccl --devices 0,0 -n 20 -w 5 -b 8 -e 256M -f 8 --coll all \
      --json "$pdir/bench-1gpu.jsonl"
    step bench-1gpu-graph 60 "$cb" --backend conccl --devices 0,0 -n 20 -w 5 -b 8 -e 1M -f 32 -G 1 \
      --coll all_gather,reduce_scatter,all_reduce
    step bench-1rank 90 "$cb" --backend conccl,nccl,nccl-ce -g 1 -n 20 -w 5 -b 8 -e 64M -f 8 \
      --coll all_gather,all_to_all,reduce_scatter,all_reduce --json "$pdir/bench-1rank.jsonl"
  fi
  [ "$dry" = 1 ] && return
  grep -hE '^(same|peer|verdict)' "$pdir/ce-probe.log" 2>/dev/null | sed 's/^/bench: /' >>"$notes"
  grep -HE 'Avg bus bandwidth|Out of bounds' "$pdir"/bench-*.log 2>/dev/null | sed "s|^$pdir/|bench: |" >>"$notes"
}

# ==================================================================================================================
# sweep: conccl-bench (backends side by side, nine collectives, checked 8 B..SMALL_MAX factor 2, unchecked 256 MB..
# SWEEP_MAX factor 4) with -g N (one thread, groups) and -t N -g 1 (a thread per rank); nccl-tests the same ways.
phase_sweep() {
  if [ "$ngpus" -lt 2 ]; then skip sweep "needs 2+ GPUs ($ngpus here)"; return; fi
  local cb="$bin/conccl-bench"
  need "$cb" conccl-bench || return
  local modes="${MODES:-g t}" mode part
  local colls="${COLLS:-all_gather,reduce_scatter,all_reduce,broadcast,reduce,all_to_all,gather,scatter,sendrecv}"
  local max="${SWEEP_MAX:-4G}" iters="${ITERS:-20}" warmup="${WARMUP:-5}"
  if [ "${NCCL_TESTS:-1}" = 1 ] && ! unpack_nccl_tests; then
    skip nccl-tests "no $stage/nccl-tests.tar.xz (scripts/build-nccl-tests.sh after gpu-build.sh)"
  fi
  mode_flags() { if [ "$1" = t ]; then echo "-t $ngpus -g 1"; else echo "-g $ngpus"; fi; }
  sweep_bench() {  # MODE small|large
    local common
    read -ra common <<<"--backend ${BACKENDS:-conccl,nccl} $(mode_flags "$1") -n $iters -w $warmup --coll $colls"
    if [ "$2" = small ]; then
      step "bench-$1-small" 150 "$cb" "${common[@]}" -b 8 -e "${SMALL_MAX:-64M}" -f 2 -c 1 \
        --json "$pdir/bench-$1-small.jsonl"
    elif [ "$(bytes_of "$max")" -ge $((256 << 20)) ]; then
      # Unchecked above SMALL_MAX, so that generating and checking gigabytes on the host does not take the budget.
      step "bench-$1-large" 150 "$cb" "${common[@]}" -b 256M -e "$max" -f 4 -c 0 --json "$pdir/bench-$1-large.jsonl"
    fi
  }
  sweep_nccl_tests() {  # MODE: every *_perf of COLLS, one combined file per mode
    local stem coll args
    [ -n "$nt_dir" ] || return 0
    [ "$dry" = 1 ] || : >"$pdir/nccl-tests-$1.txt"
    for stem in all_gather reduce_scatter all_reduce broadcast reduce alltoall gather scatter sendrecv; do
      coll="$stem"
      [ "$stem" = alltoall ] && coll=all_to_all
      [[ ",$colls," == *",$coll,"* ]] || continue
      read -ra args <<<"-b 8 -e $max -f 2 $(mode_flags "$1") -c 1 -n $iters -w $warmup"
      step "nt-$1-$stem" 40 "$nt_dir/${stem}_perf" "${args[@]}"
      [ "$dry" = 1 ] && continue
      { echo "# nccl-tests: ${stem}_perf ${args[*]}"; cat "$pdir/nt-$1-$stem.log"; } >>"$pdir/nccl-tests-$1.txt"
    done
  }
  # Most important first, should the budget run out: -g whole, then -t's small sizes and nccl-tests, its large last.
  for mode in $modes; do
    sweep_bench "$mode" small
    [ "$mode" = g ] && sweep_bench "$mode" large
    sweep_nccl_tests "$mode"
  done
  for mode in $modes; do [ "$mode" != g ] && sweep_bench "$mode" large; done
  [ "$dry" = 1 ] && return
  local args=()
  for mode in $modes; do
    for part in small large; do
      [ -f "$pdir/bench-$mode-$part.jsonl" ] && cat "$pdir/bench-$mode-$part.jsonl"
    done >"$pdir/bench-$mode.jsonl"
    rm -f "$pdir/bench-$mode-small.jsonl" "$pdir/bench-$mode-large.jsonl"
    args+=(--bench "$mode=$pdir/bench-$mode.jsonl")
    [ -f "$pdir/nccl-tests-$mode.txt" ] && args+=(--nccl-tests "$mode=$pdir/nccl-tests-$mode.txt")
  done
  python3 tools/bench/sweep_summary.py "${args[@]}" >"$pdir/summary.txt" 2>&1
  sed 's/^/sweep: /' "$pdir/summary.txt" >>"$notes"
}

bytes_of() {  # 64M -> bytes
  local v="${1%[KMGkmg]}" u="${1: -1}"
  case "$u" in K | k) echo $((v << 10)) ;; M | m) echo $((v << 20)) ;; G | g) echo $((v << 30)) ;; *) echo "$1" ;; esac
}

# ==================================================================================================================
# tune: the sweeps behind the per-GPU-count defaults (src/core/tuned_defaults.cc, docs/tuning.md), across every GPU;
# tools/bench/pick_defaults.py turns them into that table's row for this GPU count (tune-row.txt).
phase_tune() {
  if [ "$ngpus" -lt 2 ]; then skip tune "needs 2+ GPUs ($ngpus here)"; return; fi
  local cb="$bin/conccl-bench" v
  need "$cb" conccl-bench || return
  local tune=" ${TUNE:-ss mc lanes small ctas} "
  local sweep=("$cb" --backend conccl -g "$ngpus" -n 20 -w 5 -c 0)
  if [[ "$tune" == *" ss "* ]]; then for v in 262144 4194304 67108864; do
    step "tune-ss$v" 60 env CONCCL_SINGLE_STREAM_BYTES=$v "${sweep[@]}" -b 128K -e 32M -f 4 \
      --coll all_gather,reduce_scatter,all_reduce,all_to_all --json "$pdir/tune-ss$v.jsonl"
  done; fi
  if [[ "$tune" == *" mc "* ]]; then for v in 524288 2097152 8388608 33554432; do
    step "tune-mc$v" 60 env CONCCL_MIN_CHUNK_BYTES=$v "${sweep[@]}" -b 1M -e 256M -f 4 \
      --coll reduce_scatter,all_reduce --json "$pdir/tune-mc$v.jsonl"
  done; fi
  if [[ "$tune" == *" lanes "* ]]; then for v in 1 2; do  # a row never raises lanes above the default 2
    step "tune-lanes$v" 60 env CONCCL_LANES=$v "${sweep[@]}" -b 1M -e 256M -f 4 \
      --coll all_gather,reduce_scatter,all_reduce,all_to_all,broadcast --json "$pdir/tune-lanes$v.jsonl"
  done; fi
  if [[ "$tune" == *" small "* ]]; then for v in 16384 65536 262144; do
    step "tune-small$v" 60 env CONCCL_SMALL_MESSAGE_BYTES=$v "${sweep[@]}" -b 4K -e 1M -f 2 \
      --coll all_gather,reduce_scatter,all_reduce,all_to_all,broadcast --json "$pdir/tune-small$v.jsonl"
  done; fi
  if [[ "$tune" == *" ctas "* ]]; then for v in 4 8 16; do
    step "tune-ctas$v" 60 "${sweep[@]}" -b 16M -e 1G -f 4 --reduce-ctas "$v" --coll reduce_scatter,all_reduce \
      --json "$pdir/tune-ctas$v.jsonl"
  done; fi
  [ "$dry" = 1 ] && return
  local f tag
  for f in "$pdir"/tune-*.jsonl; do  # one file, each row tagged with its step
    [ -f "$f" ] || continue
    tag="$(basename "$f" .jsonl)"
    sed "s/^{/{\"tune\":\"$tag\",/" "$f"
    rm -f "$f"
  done >"$pdir/tune.jsonl"
  python3 tools/bench/pick_defaults.py --gpus "$ngpus" "$pdir/tune.jsonl" >"$pdir/tune-row.txt" 2>&1
  sed 's/^/tune: /' "$pdir/tune-row.txt" >>"$notes"
}

# ==================================================================================================================
# host-cost: conccl-bench rows under each variant (NAME=VAR:VALUE,VAR:VALUE), side by side: time_us and host_us.
# Thread-per-rank staged calls, for instance: VARIANTS="ts0=CONCCL_THREAD_STAGED:0 ts1=CONCCL_THREAD_STAGED:1" MODES=t
phase_host_cost() {
  local cb="$bin/conccl-bench"
  need "$cb" conccl-bench || return
  local devices="${DEVICES:-$([ "$ngpus" -ge 2 ] && echo 0,1 || echo 0,0)}" variant name envs pair mode shape backends
  local kv first_variant=1
  for variant in ${VARIANTS:-cache-on= cache-off=CONCCL_GRAPH_CACHE:0}; do
    name="${variant%%=*}"
    envs=()
    IFS=',' read -ra kv <<<"${variant#*=}"
    for pair in "${kv[@]}"; do [ -n "$pair" ] && envs+=("${pair%%:*}=${pair#*:}"); done
    for mode in ${MODES:-g t}; do
      if [ "$mode" = g ]; then shape=(-g 2 -t 1); else shape=(-g 1 -t 2); fi
      # NCCL beside the first variant where every rank has its own GPU (NCCL refuses two ranks on one GPU).
      backends=conccl
      [ "$first_variant" = 1 ] && [ "$devices" = 0,1 ] && [ "$mode" = g ] && backends=conccl,nccl
      step "host-cost-$name-$mode" 150 env "${envs[@]}" "$cb" --backend "$backends" "${shape[@]}" --devices "$devices" \
        -b "${MINB:-8}" -e "${MAXB:-64M}" -f 4 -n "${ITERS:-50}" -w 10 --coll "${COLLS:-all}" \
        --json "$pdir/host-cost-$name-$mode.jsonl"
    done
    first_variant=0
  done
  [ "$dry" = 1 ] && return
  python3 - "$pdir" >"$pdir/host-cost.txt" 2>&1 <<'PY'
import glob, json, os, sys
rows, variants, wrong = {}, [], 0
for path in sorted(glob.glob(os.path.join(sys.argv[1], "host-cost-*.jsonl")), key=os.path.getmtime):
    name, mode = os.path.basename(path)[len("host-cost-"):-len(".jsonl")].rsplit("-", 1)
    if name not in variants:
        variants.append(name)
    for line in open(path):
        r = json.loads(line)
        if r.get("metadata") or "coll" not in r or r.get("time_us") is None or r["in_place"]:
            continue
        wrong += 0 if r.get("wrong") in (0, None) else 1
        cell = rows.setdefault((mode, r["coll"], r["size"]), {})
        cell["nccl" if r["backend"] == "nccl" else name] = (r["time_us"], r.get("host_us") or 0.0)
print("out of place; time_us / host_us per variant (host_us: a rank's thread inside the call, median)")
print("mode coll            bytes     " + "".join(f"{v:>22s}" for v in variants) + f"{'NCCL time_us':>14s}")
for (mode, coll, size), cell in sorted(rows.items()):
    line = f"-{mode}  {coll:15s} {size:>9d} "
    for v in variants:
        t, h = cell.get(v, (float("nan"), float("nan")))
        line += f"  {t:10.1f} /{h:8.1f}"
    line += f"  {cell['nccl'][0]:12.1f}" if "nccl" in cell else f"  {'-':>12s}"
    print(line)
for v in variants:
    hosts = [c[v][1] for c in rows.values() if v in c]
    if hosts:
        low = sum(h <= 10 for h in hosts)
        print(f"{v}: host_us max {max(hosts):.1f}, {low} of {len(hosts)} rows at or below 10 us")
print(f"rows with wrong values: {wrong}")
PY
  tail -n 4 "$pdir/host-cost.txt" | sed 's/^/host-cost: /' >>"$notes"
}

# ==================================================================================================================
phase_multiproc() {
  local py_lib="$PWD/$lib"
  if have "$bin/multiprocess_allreduce"; then
    step example-2procs 60 env LD_LIBRARY_PATH="$py_lib:${LD_LIBRARY_PATH:-}" "$bin/multiprocess_allreduce" 2
    step example-4procs 90 env LD_LIBRARY_PATH="$py_lib:${LD_LIBRARY_PATH:-}" "$bin/multiprocess_allreduce" 4
  else
    need "$bin/multiprocess_allreduce" example
  fi
  # The PyTorch snippet of docs/multiprocess.md (gpu-build.sh extracts it), through ctypes, torchrun, 2 processes.
  if have "$PY" && have "$lib/libconccl.so.0" && have "$stage/scripts/conccl_allreduce.py"; then
    step torch-2procs 120 env CONCCL_LIB="$py_lib/libconccl.so.0" "$PY" -m torch.distributed.run --standalone \
      --nproc-per-node=2 "$stage/scripts/conccl_allreduce.py"
  else
    skip torch-2procs "no $PY with torch, or no staged libconccl.so.0 / conccl_allreduce.py"
  fi
  if [ "$dry" != 1 ]; then
    local left
    left="$(find /dev/shm -maxdepth 1 -name '*conccl*' 2>/dev/null | wc -l)"
    if [ "$left" -eq 0 ]; then record dev-shm PASS 0 "no conccl entry left in /dev/shm"
    else record dev-shm "FAIL(left $left)" 0 "conccl entries left in /dev/shm"; fi
  fi
  have "$bin/test_gpu_multiprocess" || return 0
  # Staged calls (no host rendezvous up to CONCCL_STAGED_MAX_BYTES): correctness both ways, no wait for late peers,
  # and the hot path's host time against the regular path's (the log prints both).
  step mp-staged 150 "$bin/test_gpu_multiprocess" --gtest_brief=1 \
    --gtest_filter='*StagedCalls*/0:*EveryCollectiveMatchesTheReference*/0:*Staged.*'
  # The copy-engine path across processes with the graph cache off and on: host time per call of the hot path.
  local cache
  for cache in 0 64; do
    step "mp-cache$cache" 200 env CONCCL_SMALL_MESSAGE_BYTES=0 CONCCL_GRAPH_CACHE=$cache \
      "$bin/test_gpu_multiprocess" --gtest_brief=1 --gtest_filter='*EveryCollective*:*Symmetric*'
  done
  [ "$dry" = 1 ] && return
  grep -hE 'host time|staged calls' "$pdir"/mp-*.log 2>/dev/null >"$pdir/mp-host-time.txt"
  head -12 "$pdir/mp-host-time.txt" | sed 's/^/multiproc: /' >>"$notes"
}

# ==================================================================================================================
# mp-suite: test_gpu_multiprocess whole, as gtest shards (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX: every test lands in
# exactly one shard), so that each device call holds one shard.
phase_mp_suite() {
  need "$bin/test_gpu_multiprocess" test_gpu_multiprocess || return 0
  local shards="${MP_SHARDS:-3}" which="${MP_SHARD:-all}" k first last
  if [ "$which" = all ]; then
    first=1
    last="$shards"
  elif [[ "$which" =~ ^([0-9]+)/([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -ge 1 ] &&
    [ "${BASH_REMATCH[1]}" -le "${BASH_REMATCH[2]}" ]; then
    first="${BASH_REMATCH[1]}"
    last="$first"
    shards="${BASH_REMATCH[2]}"
  else
    record shard "FAIL(usage)" 0 "MP_SHARD=$which: expected all or k/n with 1 <= k <= n"
    return 0
  fi
  for ((k = first; k <= last; k++)); do
    step "shard-$k-of-$shards" 300 env GTEST_TOTAL_SHARDS="$shards" GTEST_SHARD_INDEX=$((k - 1)) \
      CONCCL_TEST_WORKER_LIMIT_S=60 "$bin/test_gpu_multiprocess" --gtest_brief=1
  done
  [ "$dry" = 1 ] && return
  grep -h -A6 'rank 0: host time per call' "$pdir"/shard-*.log 2>/dev/null | grep -E 'p50' | head -12 |
    sed 's/^ */late calls: /' >>"$notes" || true
}

# ==================================================================================================================
# shim: the NCCL drop-in (libconccl_nccl.so preloaded) under its GPU test, nccl-tests, torch.distributed and FSDP2,
# beside plain NCCL where plain NCCL can run (>= 2 GPUs: it refuses ranks that share a GPU).
phase_shim() {
  local shim="${SHIM:-$PWD/$lib/libconccl_nccl.so}"
  need "$shim" libconccl_nccl.so || return
  local sp=",${SHIM_PHASES:-gtest,ncclt,torch,fsdp},"
  local np="${NP:-$((ngpus >= 2 ? ngpus : 2))}"
  shim_env=(env LD_PRELOAD="$shim" CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2"
            LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}")
  nccl_env=(env LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}")
  torchrun=("$PY" -m torch.distributed.run --standalone --nproc-per-node "$np")
  [ "$dry" = 1 ] || {
    echo "torch processes: $np"
    "$PY" -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())'
    echo "real NCCL:" "$NCCL_LIB"/libnccl.so*; } >"$pdir/environment.txt" 2>&1
  [[ "$sp" == *,gtest,* ]] && shim_gtest
  [[ "$sp" == *,ncclt,* ]] && shim_nccl_tests
  [[ "$sp" == *,torch,* ]] && shim_torch "$np"
  [[ "$sp" == *,fsdp,* ]] && shim_fsdp "$np"
  return 0
}

# How many communicators of a log took each path (the shim prints one line per communicator, always).
shim_paths() {
  local c n
  c="$(grep -c 'conccl-shim: .* -> conccl (' "$1" 2>/dev/null)"
  n="$(grep -c 'conccl-shim: .* -> NCCL (' "$1" 2>/dev/null)"
  echo "comms: ${c:-0} conccl, ${n:-0} NCCL"
}
conccl_comms() { grep -c 'conccl-shim: .* -> conccl (' "$1" 2>/dev/null || true; }
# The first errors a failed Python run printed (not torchrun's own ChildFailedError wrapper).
why_failed() {
  local what='MISMATCH|TIMED OUT|no CUDA device|(Error|Exception)[:(]|NCCL (WARN|error)|conccl-shim: .*(fail|WARN)'
  grep -E "$what" "$1" 2>/dev/null |
    grep -v 'ChildFailedError\|elastic/multiprocessing' | head -3 | cut -c1-300 | tr '\n' ' '
}
# shim_verdict NAME LOG [shim]: PASS/FAIL from RC; a shim run must have put at least one communicator on conccl.
shim_verdict() {
  local v=PASS note="${3:-}"
  [ "$RC" -ne 0 ] && v="FAIL(rc=$RC)" && note="$note $(why_failed "$2")"
  if [ "${4:-}" = shim ]; then
    note="$note; $(shim_paths "$2")"
    [ "$(conccl_comms "$2")" -ge 1 ] || { v="FAIL(no conccl comm)"; }
  fi
  record "$1" "$v" "$SECS" "$note"
}

shim_gtest() {
  have "$bin/test_gpu_nccl_shim" || { need "$bin/test_gpu_nccl_shim" gtest-nccl-shim; return; }
  # PreMulSum kernel bit-exact, in graphs, split (tests/nccl/test_gpu_nccl_shim.cc).
  step gtest-nccl-shim 180 env CONCCL_NCCL_SHIM_PATH="${SHIM:-$PWD/$lib/libconccl_nccl.so}" \
    CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" "$bin/test_gpu_nccl_shim" --gtest_brief=1
}

# nt_check LOG -> "rows R wrong W busbw B"; status 0 when rows > 0, no wrong value and nccl-tests said OK.
nt_check() {
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

shim_nccl_tests() {
  if ! unpack_nccl_tests; then
    record nccl-tests "FAIL(not staged)" 0 "no $stage/nccl-tests.tar.xz: scripts/build-nccl-tests.sh after gpu-build.sh"
    return
  fi
  local common=(-b 8 -e "${MAX_BYTES:-64M}" -f 4 -c 1 -n "${NT_ITERS:-10}" -w "${NT_WARMUP:-3}")
  [ "$ngpus" -lt 2 ] && skip "nccl-tests-nccl" "one GPU: only one-rank communicators (-g 1), through the shim"
  local timeouts=0 t m name args envv verdict v perf
  local perfs=(all_gather reduce_scatter all_reduce broadcast reduce alltoall gather scatter sendrecv)
  for t in "${perfs[@]}"; do
    perf="$nt_dir/${t}_perf"
    have "$perf" || continue
    local modes=("shim-g$ngpus:-g $ngpus" "shim-g$ngpus-graph:-g $ngpus -G 1")
    # Every op of the reductions, PreMulSum included, checked by nccl-tests' own data (-o all: six runs per size).
    case "$t" in
      all_reduce | reduce_scatter | reduce) modes+=("shim-g$ngpus-allops:-g $ngpus -o all -e ${ALLOPS_MAX_BYTES:-4M}") ;;
    esac
    [ "$ngpus" -ge 2 ] && modes+=("shim-t$ngpus:-t $ngpus -g 1" "nccl-g$ngpus:-g $ngpus" "nccl-t$ngpus:-t $ngpus -g 1")
    for m in "${modes[@]}"; do
      name="nt-$t-${m%%:*}"
      read -ra args <<<"${m#*:}"
      envv=("${shim_env[@]}")
      [[ "$name" == *-nccl-* ]] && envv=("${nccl_env[@]}")
      if [ "$timeouts" -ge 2 ]; then skip "$name" "two nccl-tests runs timed out already"; continue; fi
      run_bounded "$name" 60 "${envv[@]}" "$perf" "${common[@]}" "${args[@]}" || continue
      { [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; } && timeouts=$((timeouts + 1))
      v=PASS
      verdict="$(nt_check "$pdir/$name.log")" || v=FAIL
      [ "$RC" -ne 0 ] && v="FAIL(rc=$RC)"
      if [[ "$name" == *-shim-* ]]; then
        verdict="$verdict; $(shim_paths "$pdir/$name.log")"
        [ "$(conccl_comms "$pdir/$name.log")" -ge 1 ] || v="FAIL(no conccl comm)"
      fi
      record "$name" "$v" "$SECS" "$verdict"
    done
  done
}

rank_lines() { grep -h '\] \(OK\|FAILED\):' "$1" | head -"$2" | tr '\n' ' '; }  # LOG NP: each rank's verdict
shim_torch() {
  local np="$1" name
  # tests/torch/shim_collectives.py: every collective PyTorch uses, against a reference on fresh data.
  name=torch-collectives-shim
  run_bounded "$name" 240 "${shim_env[@]}" "${torchrun[@]}" tests/torch/shim_collectives.py --expect-path conccl &&
    shim_verdict "$name" "$pdir/$name.log" "$(rank_lines "$pdir/$name.log" "$np")" shim
  if [ "$ngpus" -lt 2 ]; then skip torch-collectives-nccl "one GPU: plain NCCL refuses $np ranks on one GPU"; return; fi
  name=torch-collectives-nccl
  run_bounded "$name" 240 "${nccl_env[@]}" "${torchrun[@]}" tests/torch/shim_collectives.py --expect-path NCCL &&
    shim_verdict "$name" "$pdir/$name.log" "$(rank_lines "$pdir/$name.log" "$np")"
}

# FSDP2 (tests/torch/shim_fsdp2.py) through the shim against the single-process reference of the same global batch,
# and against plain NCCL with 2+ GPUs; ReduceOp.AVG and a divide factor (PreMulSum reduce-scatter).
shim_fsdp() {
  local np="$1" factor=$((2 * $1)) steps="${FSDP_STEPS:-60}"
  fsdp_run() {  # NAME shim|nccl EXTRA...
    local name="$1" kind="$2"
    shift 2
    local e=("${shim_env[@]}")
    [ "$kind" = nccl ] && e=("${nccl_env[@]}")
    run_bounded "$name" 180 "${e[@]}" "${torchrun[@]}" tests/torch/shim_fsdp2.py --steps "$steps" \
      --out "$pdir/$name.json" "$@" || return 0
    shim_verdict "$name" "$pdir/$name.log" "$(grep -h '^fsdp2:' "$pdir/$name.log" | head -1)" "$kind"
  }
  fsdp_reference() {  # NAME EXTRA...
    local name="$1"
    shift
    run_bounded "$name" 180 "$PY" tests/torch/shim_fsdp2.py --reference --world "$np" --steps "$steps" \
      --out "$pdir/$name.json" "$@" || return 0
    shim_verdict "$name" "$pdir/$name.log" "$(grep -h '^reference:' "$pdir/$name.log" | head -1)"
  }
  fsdp_compare() {  # BASELINE CANDIDATE
    local name="compare-$1-vs-$2"
    run_bounded "$name" 30 "$PY" tests/torch/compare_losses.py "$pdir/$1.json" "$pdir/$2.json" || return 0
    shim_verdict "$name" "$pdir/$name.log" \
      "$(grep -h '^compare\|^step_time_median\|^FAIL:' "$pdir/$name.log" | sed 's/^compare [^(]*//' | tr '\n' ' ')"
  }
  fsdp_run fsdp-shim shim
  fsdp_run fsdp-shim-premul shim --divide-factor "$factor"
  fsdp_reference fsdp-reference
  fsdp_reference fsdp-reference-premul --divide-factor "$factor"
  fsdp_compare fsdp-reference fsdp-shim
  fsdp_compare fsdp-reference-premul fsdp-shim-premul
  if [ "$ngpus" -lt 2 ]; then skip fsdp-nccl "one GPU: plain NCCL refuses $np ranks on one GPU"; return; fi
  fsdp_run fsdp-nccl nccl
  fsdp_run fsdp-nccl-premul nccl --divide-factor "$factor"
  fsdp_compare fsdp-nccl fsdp-shim
  fsdp_compare fsdp-nccl-premul fsdp-shim-premul
  fsdp_compare fsdp-reference fsdp-nccl
}

# ==================================================================================================================
phase_c3() {
  local c3="$bin/conccl-c3"
  need "$c3" conccl-c3 || return
  if [ "$ngpus" -lt 2 ]; then
    # One GPU: GEMM time vs SM budget (cuBLASLt SM-count target, green contexts), and every strategy's code path.
    step c3-sm-sweep 150 "$c3" --sm-sweep --json "$pdir/c3-sm-sweep.json"
    step c3-1rank 150 "$c3" -g 1 --grid small --json "$pdir/c3-1rank.json"
    return
  fi
  local ranks="${C3_RANKS:-$ngpus}" rounds="${C3_ROUNDS:-5}" iters="${C3_ITERS:-10}" extra=() grid=()
  read -ra extra <<<"${C3_EXTRA:-}"
  [ -n "${C3_GRID:-}" ] && grid=(--grid "$C3_GRID")
  local cal="$pdir/c3-calibration.json"
  if [ -n "${C3_CAL:-}" ]; then
    [ "$dry" = 1 ] || cp "$C3_CAL" "$cal"
  else
    # The planner's slowdowns per strategy, GEMM bound and collective kind (~1 min on 2 H200s).
    step c3-calibrate 240 "$c3" -g "$ranks" --rounds "$rounds" --iters "$iters" --calibrate "$cal" \
      --json "$pdir/c3-calibration-rows.json" "${extra[@]}"
  fi
  local calflag=(--calibration "$cal")
  [ "$dry" = 1 ] || [ -s "$cal" ] || calflag=()
  # The plot needs a Python with matplotlib.
  local p
  for p in "$PY" python3; do
    if [ "$dry" != 1 ] && "$p" -c 'import matplotlib' 2>/dev/null; then
      PATH="$(dirname "$(command -v "$p")"):$PATH"
      export PATH CONCCL_C3_PLOT_SCRIPT="$root/tools/c3/plot_c3.py"
      break
    fi
  done
  step c3-grid 420 "$c3" -g "$ranks" --rounds "$rounds" --iters "$iters" "${grid[@]}" "${calflag[@]}" \
    --json "$pdir/c3.json" --plot "$pdir/c3.png" "${extra[@]}"
  [ "$dry" = 1 ] || grep -h '^# summary' "$pdir"/c3-*.log 2>/dev/null | sed 's/^/c3: /' >>"$notes"
}

# ==================================================================================================================
phase_tp_bench() {
  local tp="$bin/conccl-tp-bench" args=()
  need "$tp" conccl-tp-bench || return
  read -ra args <<<"${TP_ARGS:-}"
  # Every strategy's result against serial NCCL's before any time is believed, then the table.
  step tp-check 200 "$tp" --tokens "${TP_CHECK_TOKENS:-2048}" --check --iters 5 --warmup 2 "${args[@]}" \
    --json "$pdir/tp-check.jsonl"
  step tp-bench 360 "$tp" "${args[@]}" --json "$pdir/tp-bench.jsonl"
}

# ==================================================================================================================
phase_fused() {
  # The C interface itself (device-memory checks; both ops from one thread and a thread per rank, against the host).
  have "$bin/test_gpu_ops_c_api" && step test_gpu_ops_c_api 120 \
    env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64" "$bin/test_gpu_ops_c_api" \
    --gtest_brief=1
  # conccl's fused ops from PyTorch through ctypes (one process; with one GPU, two ranks share it).
  if need "$lib/libconccl_ops.so.0" example-fused-ops; then
    step example-fused-ops 180 env CONCCL_LIB="$PWD/$lib/libconccl.so.0" CONCCL_OPS_LIB="$PWD/$lib/libconccl_ops.so.0" \
      "$PY" examples/torch/fused_ops.py
  fi
  # PyTorch's own fused ops and the serial NCCL baseline on the LLaMA-3 MLP shapes (a GPU per process).
  if [ "$ngpus" -lt 2 ]; then
    skip torch-fused-bench "needs 2+ GPUs: torch's fused ops and NCCL want a GPU per process"
    return
  fi
  local args=()
  read -ra args <<<"${FUSED_BENCH_ARGS:-}"
  step torch-fused-bench 420 "$PY" -m torch.distributed.run --standalone --nproc-per-node 2 \
    tests/torch/torch_fused_bench.py --out "$pdir/torch-fused-bench.jsonl" "${args[@]}"
}

# ==================================================================================================================
phase_torch() {
  if [ ! -f tests/torch/run_all.sh ]; then skip run_all "tests/torch/run_all.sh does not exist (yet)"; return; fi
  step run_all 540 env PY="$PY" NCCL_LIB="$NCCL_LIB" BUDGET_S=500 bash tests/torch/run_all.sh \
    "$lib/libconccl_nccl.so" "$pdir/run_all"
}

# ==================================================================================================================
# vmm: VMM memory (PyTorch's expandable segments) exported piece by piece to the peer processes
# (src/exec/cuda/vmm_export.h; CONCCL_VMM_EXPORT, on by default since this phase's runs of 2026-12-05).
phase_vmm() {
  if need "$bin/test_gpu_multiprocess" vmm-mp; then
    step vmm-mp 240 "$bin/test_gpu_multiprocess" --gtest_brief=1 \
      --gtest_filter='*ShareableVmmMemoryMovesDirectly*:*MemoryCudaIpcCannotShare*'
  fi
  if [ -f tests/torch/run_all.sh ]; then
    step torch-vmm 300 env PY="$PY" NCCL_LIB="$NCCL_LIB" BUDGET_S=270 NO_NCCL=1 CASES=workloads \
      NPS="${VMM_NPS:-2 4}" ALLOCS=expandable-export CONCCL_DEBUG=INFO bash tests/torch/run_all.sh \
      "$lib/libconccl_nccl.so" "$pdir/torch-vmm"
    [ "$dry" = 1 ] || grep -rh "cannot be shared, so calls on it are staged" "$pdir/torch-vmm" 2>/dev/null | head -3 \
      | sed 's/^/vmm: staged instead: /' >>"$notes"
  fi
}

# ==================================================================================================================
# late: host time of calls whose peer is 2 s late (docs/dev/next-steps.md item 1): the figure, then where it goes.
phase_late() {
  if need "$bin/test_gpu_multiprocess" late-capi; then
    local filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0'
    step late-capi 100 env CONCCL_TEST_WORKER_LIMIT_S=60 "$bin/test_gpu_multiprocess" --gtest_filter="$filter"
    step late-capi-routed 100 env CONCCL_STAGED_MAX_BYTES=0 CONCCL_TEST_WORKER_LIMIT_S=60 \
      "$bin/test_gpu_multiprocess" --gtest_filter="$filter"
    step late-capi-laps 100 env CONCCL_DEBUG=TRACE CONCCL_TEST_WORKER_LIMIT_S=60 "$bin/test_gpu_multiprocess" \
      --gtest_filter="$filter"
  fi
  if [ -f tests/torch/run_all.sh ]; then
    step late-dropin 240 env PY="$PY" NCCL_LIB="$NCCL_LIB" BUDGET_S=220 CASES=skew NPS=2 \
      SKEW_CALLS="${LATE_SKEW_CALLS:-5}" bash tests/torch/run_all.sh "$lib/libconccl_nccl.so" "$pdir/late-dropin"
    step late-dropin-laps 120 env PY="$PY" NCCL_LIB="$NCCL_LIB" BUDGET_S=100 CASES=skew NPS=2 NO_NCCL=1 SKEW_CALLS=3 \
      CONCCL_DEBUG=TRACE bash tests/torch/run_all.sh "$lib/libconccl_nccl.so" "$pdir/late-dropin-laps"
  fi
  [ "$dry" = 1 ] && return
  local f
  for f in late-capi late-capi-routed; do
    grep -a -A7 "rank 0: host time per call" "$pdir/$f.log" 2>/dev/null | head -8 | cut -c1-200 | sed "s/^/$f: /" \
      >>"$notes"
  done
  grep -a -A10 "^host time per call" "$pdir/late-dropin/summary.txt" 2>/dev/null | head -12 | sed 's/^/late-dropin: /' \
    >>"$notes"
  # The last laps line of each call kind on rank 0, at the C API and through the drop-in.
  for f in late-capi-laps late-dropin-laps; do
    grep -rah "host laps of" "$pdir/$f.log" "$pdir/$f" 2>/dev/null | grep -a "rank 0 " >"$pdir/$f.txt"
    awk '{k = $0; sub(/.*host laps of /, "", k); sub(/ #[0-9]+:.*/, "", k); last[k] = $0}
      END {for (k in last) print last[k]}' "$pdir/$f.txt" | sed 's/.*host laps of //' | cut -c1-300 \
      | sed "s/^/$f: /" >>"$notes"
  done
}

# ==================================================================================================================
# verify: changes made on the CPU and not yet run on a GPU (docs/dev/next-steps.md item 0), most decisive first.
phase_verify() {
  if need "$bin/test_gpu_vmm_piece_check" vmm-piece; then step vmm-piece 60 "$bin/test_gpu_vmm_piece_check"; fi
  if need "$bin/test_gpu_multiprocess" verify-mp; then
    step memory-return 150 "$bin/test_gpu_multiprocess" --gtest_filter='*FreedMemoryGoesBackWithoutFurtherCalls/0'
    # TRACE: its "superseded" lines say the import table closed a mapping an idle communicator still held.
    step address-reuse 90 env CONCCL_DEBUG=TRACE "$bin/test_gpu_multiprocess" \
      --gtest_filter='*FreedPlaceUsedAgainAtOnceOnAnotherCommunicator/0'
    step verify-mp 300 env CONCCL_TEST_WORKER_LIMIT_S=120 "$bin/test_gpu_multiprocess" --gtest_brief=1 \
      --gtest_filter='*ShareableVmmMemoryMovesDirectly/0:*EveryCollectiveMatchesTheReference/1:*PairOwnedLateCallsMatchTheReference/0:*ChunkedCallsAcrossProcesses/0:*SymmetricWindowCallsMatchTheReference/0'
    step late-one-shot 120 env CONCCL_TEST_MAX_HOST_US=1e6 CONCCL_TEST_WORKER_LIMIT_S=60 \
      "$bin/test_gpu_multiprocess" --gtest_filter='*CallsDoNotWaitForLatePeers/1'
  fi
  if [ -f tests/torch/run_all.sh ]; then
    step torch-workloads 300 env PY="$PY" NCCL_LIB="$NCCL_LIB" BUDGET_S=270 NO_NCCL=1 CASES=workloads \
      NPS="${VERIFY_NPS:-2}" ALLOCS=expandable-export bash tests/torch/run_all.sh "$lib/libconccl_nccl.so" \
      "$pdir/torch-workloads"
    if [ "$dry" != 1 ] && grep -rqa "CASE memory_return FAIL" "$pdir/torch-workloads" 2>/dev/null; then
      step memory-return-trace 120 env PY="$PY" NCCL_LIB="$NCCL_LIB" BUDGET_S=100 NO_NCCL=1 CASES=workloads NPS=2 \
        ALLOCS=expandable-export WORKLOAD_CASES=memory_return CONCCL_DEBUG=TRACE bash tests/torch/run_all.sh \
        "$lib/libconccl_nccl.so" "$pdir/memory-return-trace"
      grep -rah "unmapped allocation\|stays mapped\|swept \|logged " "$pdir/memory-return-trace" 2>/dev/null | \
        sed 's/^[^]]*\] //' | cut -c1-160 | sort | uniq -c | sort -rn | head -8 | sed 's/^/verify: /' >>"$notes"
    fi
  fi
  [ "$dry" = 1 ] && return
  grep -ah "block ids\|host time per piece" "$pdir/vmm-piece.log" 2>/dev/null | cut -c1-200 | sed 's/^/verify: /' >>"$notes"
  grep -ah "went back in" "$pdir/memory-return.log" 2>/dev/null | head -4 | cut -c1-200 | sed 's/^/verify: /' >>"$notes"
  { grep -ah "freed and allocated again (place\|FAILED\|what()" "$pdir/address-reuse.log" 2>/dev/null | head -3
    echo "superseded mappings closed: $(grep -ac "is superseded by" "$pdir/address-reuse.log" 2>/dev/null)"; } | \
    cut -c1-200 | sed 's/^/verify: address reuse: /' >>"$notes"
  grep -a -A7 "rank 0: host time per call" "$pdir/late-one-shot.log" 2>/dev/null | head -8 | cut -c1-200 | \
    sed 's/^/verify: late 1 MiB, 3 processes: /' >>"$notes"
}

# ==================================================================================================================
# capture: conccl beside a caller's CUDA graph capture in global mode (docs/multiprocess.md, "CUDA graph capture").
phase_capture() {
  if need "$bin/test_gpu_capture_mode" capture-mode; then step capture-mode 60 "$bin/test_gpu_capture_mode"; fi
  if need "$bin/test_gpu_capture_ipc" capture-ipc; then step capture-ipc 60 "$bin/test_gpu_capture_ipc"; fi
  need "$bin/test_gpu_multiprocess" unstaged-capture || return 0
  # The scenario that lost its graph intermittently (docs/results/2026-12-04-h200-1gpu-capture-host-time/): rounds
  # until one fails; the workers' own limit leaves time to read their logs.
  local i
  for i in $(seq 1 "${CAPTURE_ROUNDS:-8}"); do
    step "unstaged-capture-$i" 90 env CONCCL_TEST_WORKER_LIMIT_S=40 "$bin/test_gpu_multiprocess" --gtest_brief=1 \
      --gtest_filter='*EveryCollectiveMatchesTheReferenceUnstaged/1:*EveryCollectiveMatchesTheReferenceUnstaged/2'
    [ "$dry" = 1 ] || grep -q "^\[  PASSED  \] 2 tests" "$pdir/unstaged-capture-$i.log" || break
  done
  step graph-kill 120 "$bin/test_gpu_multiprocess" --gtest_filter='*PeerKilledDuringAGraphReplay*'
  if [ -f tests/torch/run_all.sh ]; then
    step torch-graphs 300 env PY="$PY" NCCL_LIB="$NCCL_LIB" BUDGET_S=270 CASES=workloads \
      WORKLOAD_CASES=graphs,compile bash tests/torch/run_all.sh "$lib/libconccl_nccl.so" "$pdir/torch-graphs"
  fi
}

# ==================================================================================================================
# repro: each fix that a test can turn off (the tests' *Repro.DISABLED_* cases, Config's test-only switches set
# through ConfigTestHook) must bring its failure back.
phase_repro() {
  # The shared-GPU hardware-queue deadlock (docs/cuda-executor.md, Hazard 4) without the queue claim.
  expect_fail queue-claim-off 40 "$bin/test_gpu_no_hang" --gtest_brief=1 --gtest_also_run_disabled_tests \
    --gtest_filter=NoHangRepro.DISABLED_FreshCommunicatorsWithoutQueueClaim
  # A communicator's calls on two streams at once (Hazard 6) without the call-order wait.
  have "$bin/test_gpu_call_order" && expect_fail call-order-off 60 "$bin/test_gpu_call_order" --gtest_brief=1 \
    --gtest_also_run_disabled_tests --gtest_filter='CallOrderRepro.DISABLED_*'
}

# ==================================================================================================================
# shim-diag: how the FSDP2 hang of 2026-12-01 was found (docs/cuda-executor.md, Hazard 6). Two ranks started by hand
# (no torchrun, so that signals reach them), stopped after DIAG_LIMIT s if still running: GPU utilisation, each thread's
# wait channel, native backtraces (gpu-stage/lib/libbt_on_signal.so from scripts/bt_on_signal.c, SIGUSR2), then SIGABRT
# for the Python tracebacks. DIAG_ENV=CONCCL_TIMEOUT_MS=10000 makes the GPU watchdog name the call that does not end.
phase_shim_diag() {
  local name="${DIAG_NAME:-fsdp}" limit="${DIAG_LIMIT:-40}" steps="${DIAG_STEPS:-60}" bt=""
  [ -f "$lib/libbt_on_signal.so" ] && bt="$PWD/$lib/libbt_on_signal.so"
  local envs=(CONCCL_DEBUG="${CONCCL_DEBUG:-INFO}") e
  for e in ${DIAG_ENV:-}; do envs+=("$e"); done
  if [ "$dry" = 1 ]; then
    printf '  %-30s (<= %4ss) 2 x %s\n' "$phase/$name" "$limit" "$(printf '%q ' env "${envs[@]}" \
      LD_PRELOAD="$lib/libconccl_nccl.so${bt:+:$bt}" RANK=r WORLD_SIZE=2 "$PY" tests/torch/shim_fsdp2.py \
      --steps "$steps")"
    return
  fi
  local pids=() port=$((29500 + RANDOM % 1000)) r t p
  for r in 0 1; do
    env "${envs[@]}" LD_PRELOAD="$PWD/$lib/libconccl_nccl.so${bt:+:$bt}" CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2" \
      LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}" PYTHONFAULTHANDLER=1 RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$PY" tests/torch/shim_fsdp2.py --steps "$steps" \
      --out "$pdir/$name.json" >"$pdir/$name-r$r.log" 2>&1 &
    pids+=($!)
    [ $r = 0 ] && sleep 1
  done
  t=0
  while [ $t -lt "$limit" ] && kill -0 "${pids[@]}" 2>/dev/null; do sleep 1; t=$((t + 1)); done
  if kill -0 "${pids[0]}" 2>/dev/null || kill -0 "${pids[1]}" 2>/dev/null; then
    nvidia-smi --query-gpu=utilization.gpu --format=csv >"$pdir/$name-smi.txt" 2>&1
    for p in "${pids[@]}"; do
      if command -v gdb >/dev/null; then
        timeout 60 gdb -batch -p "$p" -ex "thread apply all bt 25" >"$pdir/$name-gdb-$p.txt" 2>&1
        continue
      fi
      if [ -n "$bt" ]; then  # SIGUSR2 (12) to each running thread: tgkill(pid, tid, 12)
        for t in /proc/"$p"/task/*; do
          if [ "$(cat "$t/wchan" 2>/dev/null)" = 0 ] || [ "${t##*/}" = "$p" ]; then
            "$PY" -c "import ctypes; ctypes.CDLL(None).syscall(234, $p, ${t##*/}, 12)"
            sleep 0.3
          fi
        done
        sleep 1
      fi
      for t in /proc/"$p"/task/*; do
        echo "$(cat "$t/comm") wchan=$(cat "$t/wchan" 2>/dev/null) $(cut -d' ' -f1 "$t/syscall" 2>/dev/null)"
      done >"$pdir/$name-tasks-$p.txt" 2>&1
    done
    kill -ABRT "${pids[@]}" 2>/dev/null
    sleep 3
    kill -9 "${pids[@]}" 2>/dev/null
    record "$name" "STUCK" "$limit" "after ${limit}s: see $name-tasks-*.txt / $name-gdb-*.txt and $name-r*.log"
  else
    record "$name" "PASS" "$t" "finished: $(grep -h 'step\|fsdp2:' "$pdir/$name-r0.log" | tail -1)"
  fi
  wait 2>/dev/null
}

# ==================================================================================================================
# Arguments.
phases=()
while [ $# -gt 0 ]; do
  case "$1" in
    --list) list_phases; exit 0 ;;
    --dry-run | -n) dry=1 ;;
    -h | --help) usage; exit 0 ;;
    check) phases+=(tests sanitize) ;;
    -*) echo "gpu.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *)
      if ! phase_names | grep -qx -- "$1"; then echo "gpu.sh: unknown phase '$1'" >&2; usage >&2; exit 2; fi
      phases+=("$1") ;;
  esac
  shift
done
if [ "${#phases[@]}" -eq 0 ]; then usage >&2; exit 2; fi

# GPUs the operating system shows (NGPUS overrides; a dry run plans for 2 unless told otherwise).
if [ -n "${NGPUS:-}" ]; then ngpus="$NGPUS"
elif [ "$dry" = 1 ]; then ngpus=2
else ngpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"; ngpus="${ngpus:-0}"; fi

if [ "$dry" = 1 ]; then
  echo "gpu.sh --dry-run: $ngpus GPU(s), stage $stage, output under \$OUT=$OUT"
else
  # Never NVLink multicast: it can take the shared GPUs out of service (../shared/DEVICE.md).
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  # Several ranks share one GPU in many steps: every stream needs its own hardware queue (docs/cuda-executor.md).
  export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
  export LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}"
  # gpu-build.sh packs bin/ into bin.tgz when the stage would not fit the device tool's carry limit.
  if [ -f "$stage/bin.tgz" ] && [ ! -d "$bin" ]; then tar -xzf "$stage/bin.tgz" -C "$stage"; fi
  mkdir -p "$OUT"
  {
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  phases: ${phases[*]}  GPUs: $ngpus  budget: ${budget}s"
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader 2>&1
    nvcc --version 2>/dev/null | tail -1
    cat "$stage/BUILD_INFO" 2>/dev/null || echo "stage: no BUILD_INFO (staged before gpu-build.sh wrote one)"
  } >"$OUT/machine.txt" 2>&1
  [ -d "$bin" ] || echo "gpu.sh: no $bin: build and stage it here first (scripts/gpu-build.sh), carry gpu-stage" >&2
fi

for phase in "${phases[@]}"; do
  pdir="$OUT/$phase"
  if [ "$dry" = 1 ]; then echo "$phase:"; else mkdir -p "$pdir"; echo "== $phase"; fi
  "phase_${phase//-/_}"
done

[ "$dry" = 1 ] && exit 0

# Pack for the device tool (at most 8 files come back, two folders down).
pack="${PACK:-logs}"
if [ "$pack" != none ]; then
  for phase in "${phases[@]}"; do
    pdir="$OUT/$phase"
    what=()
    compgen -G "$pdir/*.log" >/dev/null && what+=("$pdir"/*.log)
    [ -d "$pdir/run_all" ] && what+=("$pdir/run_all")
    [ "${#what[@]}" -gt 0 ] && tar -czf "$pdir/logs.tgz" --remove-files -C "$pdir" "${what[@]#"$pdir"/}"
  done
  # summary.txt comes next: 8 files in all at most.
  if [ "$pack" = all ] || [ "$(find "$OUT" -type f | wc -l)" -gt 7 ]; then
    tar -czf "$OUT/results.tgz" --remove-files -C "$OUT" "${phases[@]}"
    echo "gpu.sh: more than 8 files: everything but machine.txt and summary.txt is in $OUT/results.tgz" >>"$results"
  fi
fi

{
  echo "======== gpu.sh summary: ${phases[*]}, $ngpus GPU(s), $(($(date +%s) - start)) s, files in $OUT ========"
  cat "$OUT/machine.txt" 2>/dev/null
  cat "$results"
  [ -s "$notes" ] && { echo "---- figures and failures"; cat "$notes"; }
  if [ "$failures" -gt 0 ]; then echo "gpu.sh: $failures step(s) failed"
  else echo "gpu.sh: every step that ran passed"; fi
} | tee "$OUT/summary.txt"
rm -f "$results" "$notes"
[ "$failures" -eq 0 ]
