#!/usr/bin/env bash
# Issue 24 item 6: the PyTorch tests of tests/torch/, run through the conccl NCCL drop-in (LD_PRELOAD) and, where it
# makes sense, on plain NCCL as the reference, with 2 and 4 processes sharing the GPU(s), each bounded by `timeout`.
#
#   tests/torch/run_all.sh <libconccl_nccl.so> <outdir>          # on the GPU machine, from anywhere
#
# Prints one line per case, `PASS|FAIL|SKIP <case> [<np> <lib> <alloc>] (<s>s) <detail>`, and last
# `N passed, N failed, N skipped`; exits 1 if any case failed. Everything is under <outdir>: summary.txt,
# results.jsonl (the scripts' JSON lines), skew-*.jsonl (host times), logs/ (one log per run), fault/ (fault files).
#
# What runs, in this order (later runs are SKIPped once BUDGET_S is spent):
#   workloads.py   (collectives, p2p, groups, mesh2d, moe, ddp, fsdp2, fsdp2_bf16, tp, graphs, compile, memory_return)
#   ordering.py    (p2p vs each collective kind on different communicators; CONCCL_TIMEOUT_MS=$ORDERING_TIMEOUT_MS
#                   so that a deadlock fails a case in seconds)
#   pipeline_ddp.py (pipelining, 2 stages; x DDP with 4 processes)
#   stream_waits.py (side streams waiting on a call whose peers are late: a deadlock fails the case in 10 s)
#       each with NP in $NPS, through the drop-in and on plain NCCL (--sim-hosts: NCCL_HOSTID per process)
#   skew_host_time.py  NP=2, SKEW_BURST calls a round, drop-in (asserted: SKEW_ASSERT_US, or SKEW_COLD_ASSERT_US
#                      for one call a round) and plain NCCL (reported; its own time too: the drop-in is loaded in
#                      forwarding mode, CONCCL_NCCL_SHIM=0, and times every call it passes on, unless SKEW_NCCL_TIMED=0)
#   fault_cases.py     drop-in: kill (host, gpu), abort (host with each abort API, gpu), the bootstrap intruder
#                      (bootstrap_intruder.py racing the ranks), NP=2; kill host + intruder also NP=4
#   Order: the NP=2 runs, skew, the NP=2 fault cases, then NP=4 (runs and faults), then the allocator variants.
#   workloads.py again through the drop-in with PYTORCH_ALLOC_CONF=expandable_segments:True (the segments' pieces
#       exported to the peers, conccl's default) and with the older PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
#       and CONCCL_VMM_EXPORT=0 (staged instead) (--expect-expandable checks it took effect); ordering.py and
#       pipeline_ddp.py too when ALLOC_SCRIPTS says so. ALLOCS=expandable-export: expandable segments with
#       CONCCL_VMM_EXPORT=1 set explicitly; ALLOCS=hook: PyTorch's register hook
#       (TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1: ncclCommRegister / Deregister of every segment of the
#       default allocator; PyTorch turns it off under expandable segments); ALLOCS=async: PyTorch's cudaMallocAsync
#       backend (PYTORCH_ALLOC_CONF=backend:cudaMallocAsync)
#
# Environment: PY (default /opt/torch/.venv/bin/python), NCCL_LIB (the real NCCL's directory; default: torch's
#   nvidia/nccl/lib), BUDGET_S (default 420), NPS (default "2 4"), ALLOCS (default "expandable expandable-old"),
#   ALLOC_SCRIPTS (default "workloads"; e.g. "workloads ordering pipeline"), CASES (an extended regex: only run cases
#   whose name matches, e.g. 'workloads|skew'; a script's runs are named script/case@allocator, e.g. '@async$' runs
#   only the runs under ALLOCS=async), WORKLOAD_CASES (workloads.py --cases), SKEW_ASSERT_US (default 20: calls back to
#   back), SKEW_COLD_ASSERT_US (250: with SKEW_BURST=1, one call per round after an idle wait), SKEW_CALLS (rounds: 2),
#   SKEW_BURST (calls per round, back to back: 9), SKEW_ALLOCS (the allocator settings the skew case runs under, as in
#   ALLOCS: default "default"; e.g. "default expandable"), SKEW_NCCL_TIMED (1: plain NCCL's skew runs go through the
#   drop-in in forwarding mode, which times NCCL's own calls; 0: NCCL alone), ORDERING_TIMEOUT_MS (5000), NO_NCCL=1
#   (skip the plain NCCL references),
#   SMOKE_CPU=1 (no GPU: every script with --backend gloo --device cpu, no drop-in; checks the scripts' plumbing).
# Kept for every process: NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1.
set -u

if [ $# -ne 2 ]; then
  echo "usage: $0 <libconccl_nccl.so> <outdir>" >&2
  exit 2
fi
SHIM="$(realpath -m "$1")"
OUTDIR="$(realpath -m "$2")"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root" || exit 2

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SMOKE_CPU="${SMOKE_CPU:-0}"
PY="${PY:-/opt/torch/.venv/bin/python}"
BUDGET_S="${BUDGET_S:-420}"
NPS="${NPS:-2 4}"
ALLOCS="${ALLOCS:-expandable expandable-old}"
ALLOC_SCRIPTS="${ALLOC_SCRIPTS:-workloads}"
CASES="${CASES:-.}"
WORKLOAD_CASES="${WORKLOAD_CASES:-collectives,p2p,groups,mesh2d,moe,ddp,fsdp2,fsdp2_bf16,tp,graphs,compile,memory_return,mem_pool}"
SKEW_ASSERT_US="${SKEW_ASSERT_US:-20}"
SKEW_COLD_ASSERT_US="${SKEW_COLD_ASSERT_US:-250}"
SKEW_CALLS="${SKEW_CALLS:-2}"
SKEW_BURST="${SKEW_BURST:-9}"
SKEW_ALLOCS="${SKEW_ALLOCS:-default}"
SKEW_NCCL_TIMED="${SKEW_NCCL_TIMED:-1}"
ORDERING_TIMEOUT_MS="${ORDERING_TIMEOUT_MS:-5000}"
NO_NCCL="${NO_NCCL:-0}"
ORDERING_CASES="send_first_all_reduce,recv_first_all_reduce,send_first_all_gather,recv_first_all_gather"
ORDERING_CASES+=",send_first_reduce_scatter,recv_first_reduce_scatter,send_first_broadcast,recv_first_broadcast"
ORDERING_CASES+=",send_first_all_to_all,recv_first_all_to_all,ring_grouped"
STREAM_WAIT_CASES="late_all_reduce_64m,late_all_reduce_1m,late_all_gather_64m,late_broadcast_64m,late_all_to_all_1m"
STREAM_WAIT_CASES+=",late_send_recv_16m"

mkdir -p "$OUTDIR/logs" "$OUTDIR/fault" || exit 2
logs="$OUTDIR/logs"
summary="$OUTDIR/summary.txt"
results="$OUTDIR/results.jsonl"
: >"$summary"
: >"$results"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# torch.compile pays its code generation once for all the runs.
export TORCHINDUCTOR_CACHE_DIR="$work/inductor" TRITON_CACHE_DIR="$work/triton"
start="$(date +%s)"
npass=0
nfail=0
nskip=0

if [ "$SMOKE_CPU" = 1 ]; then
  dev_args=(--backend gloo --device cpu)
  LIBS_MAIN=(gloo)
  REF_LIB=""
  ALLOCS=""
else
  dev_args=()
  LIBS_MAIN=(conccl)
  REF_LIB=nccl
  [ "$NO_NCCL" = 1 ] && REF_LIB=""
  if [ -z "${NCCL_LIB:-}" ]; then
    NCCL_LIB="$("$PY" -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null)"
    [ -d "${NCCL_LIB:-}" ] || NCCL_LIB=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib
  fi
fi

# record STATUS NAME SECS NOTE
record() {
  local line
  line="$(printf '%s %s (%ss) %s' "$1" "$2" "$3" "$4" | cut -c1-1500)"
  echo "$line" | tee -a "$summary"
  case "$1" in
    PASS) npass=$((npass + 1)) ;;
    FAIL) nfail=$((nfail + 1)) ;;
    *) nskip=$((nskip + 1)) ;;
  esac
}
wanted() { [[ "$1" =~ $CASES ]]; }
left_s() { echo $((start + BUDGET_S - $(date +%s))); }

# The environment of one library / allocator configuration, as an `env` command line in the array ENVCMD, and the
# script flags it needs in ARGS_EXTRA.
set_env() {  # LIB ALLOC
  ENVCMD=(env -u PYTORCH_ALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF)
  ARGS_EXTRA=("${dev_args[@]}")
  case "$1" in
    conccl)
      ENVCMD+=(LD_PRELOAD="$SHIM" CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2"
               LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}")
      ARGS_EXTRA+=(--expect-path conccl) ;;
    nccl)
      ENVCMD+=(LD_LIBRARY_PATH="$NCCL_LIB:${LD_LIBRARY_PATH:-}" NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1)
      # NCCL_VIA_DROPIN=1 (the skew case): the drop-in passes every call on to the real NCCL and times each one, so
      # NCCL's own host time is reported beside the Python call's (src/nccl/call_time.h).
      if [ "${NCCL_VIA_DROPIN:-0}" = 1 ]; then
        ENVCMD+=(LD_PRELOAD="$SHIM" CONCCL_NCCL_SHIM=0 CONCCL_NCCL_REAL_LIB="$NCCL_LIB/libnccl.so.2")
      fi
      ARGS_EXTRA+=(--sim-hosts --expect-path NCCL) ;;
    gloo) ;;
  esac
  case "$2" in
    default) ;;
    expandable) ENVCMD+=(PYTORCH_ALLOC_CONF=expandable_segments:True); ARGS_EXTRA+=(--expect-expandable) ;;
    # The older variable, and the segments staged instead of exported (conccl's other path for VMM memory).
    expandable-old)
      ENVCMD+=(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True CONCCL_VMM_EXPORT=0); ARGS_EXTRA+=(--expect-expandable) ;;
    expandable-export)
      ENVCMD+=(PYTORCH_ALLOC_CONF=expandable_segments:True CONCCL_VMM_EXPORT=1); ARGS_EXTRA+=(--expect-expandable) ;;
    # PyTorch's allocator hook: every segment registered (ncclCommRegister) on every communicator, and deregistered
    # right before it is freed; --expect-registered checks that the registrations reach the drop-in
    # (PyTorch turns the hook off under expandable segments.)
    hook) ENVCMD+=(TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1); ARGS_EXTRA+=(--expect-registered) ;;
    # PyTorch on cudaMallocAsync pools (memory no peer can map: conccl stages every call on it at once).
    async) ENVCMD+=(PYTORCH_ALLOC_CONF=backend:cudaMallocAsync) ;;
    *) echo "run_all.sh: unknown allocator configuration '$2' in ALLOCS" >&2; exit 2 ;;
  esac
}

# bounded LOGNAME LIMIT CMD...: sets RC (124/137 = timed out) and SECS; returns 1 without running when the budget
# is spent.
bounded() {
  local name="$1" limit="$2" left t0
  shift 2
  left="$(left_s)"
  if [ "$left" -lt 15 ]; then
    return 1
  fi
  [ "$limit" -gt "$((left - 5))" ] && limit=$((left - 5))
  t0="$(date +%s)"
  timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
  RC=$?
  SECS=$(($(date +%s) - t0))
  if [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; then
    echo "TIMED OUT after ${limit}s (runner)" >>"$logs/$name.log"
  fi
  return 0
}

# The first lines of a log that say why a run failed.
why() {
  grep -E 'MISMATCH|TIMED OUT|Error[:(]|Exception|NCCL WARN|conccl-shim: .*(fail|WARN)|FAIL ' "$1" 2>/dev/null |
    grep -v 'ChildFailedError\|elastic/multiprocessing\|^\s*raise ' | head -2 | cut -c1-300 | tr '\n' ' '
}

# torchrun_cases SCRIPT NP LIB ALLOC LIMIT CASELIST [ARGS...]: one torchrun of SCRIPT; one summary line per case it
# reports (CASE lines of rank 0), FAIL for each expected case it never reached, FAIL if it exited non-zero anyway.
torchrun_cases() {
  local script="$1" np="$2" lib="$3" alloc="$4" limit="$5" caselist="$6"
  shift 6
  local base="${script%.py}" cfg="[np=$np $lib $alloc]" logname c seen line name verdict rest
  logname="$base-np$np-$lib-$alloc"
  local any=0
  for c in ${caselist//,/ }; do wanted "$base/$c@$alloc" && any=1; done
  [ "$any" = 1 ] || return 0
  set_env "$lib" "$alloc"
  [ -n "${RUN_ENV:-}" ] && ENVCMD+=("$RUN_ENV")
  if ! bounded "$logname" "$limit" "${ENVCMD[@]}" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$np" \
      "tests/torch/$script" "${ARGS_EXTRA[@]}" --jsonl "$results" --tag "np=$np lib=$lib alloc=$alloc" "$@"; then
    for c in ${caselist//,/ }; do record SKIP "$base/$c $cfg" 0 "time budget spent (BUDGET_S=$BUDGET_S)"; done
    return
  fi
  seen=" "
  while IFS= read -r line; do
    line="${line#*CASE }"
    name="${line%% *}"
    rest="${line#* }"
    verdict="${rest%% *}"
    rest="${rest#* }"
    [ "$verdict" = PASS ] || [ "$verdict" = FAIL ] || continue
    seen+="$name "
    record "$verdict" "$base/$name $cfg" "${rest%%s *}" "${rest#* }"
  done < <(grep -a -o 'CASE [A-Za-z0-9_]* \(PASS\|FAIL\) .*' "$logs/$logname.log")
  local missing=0
  for c in ${caselist//,/ }; do
    if [[ "$seen" != *" $c "* ]]; then
      missing=1
      record FAIL "$base/$c $cfg" "$SECS" "not reached: the run ended (rc $RC) before it; $(why "$logs/$logname.log")"
    fi
  done
  if [ "$RC" -ne 0 ] && [ "$missing" = 0 ] && ! grep -q 'CASE [A-Za-z0-9_]* FAIL' "$logs/$logname.log"; then
    record FAIL "$base/exit $cfg" "$SECS" "every case passed but the run exited $RC: $(why "$logs/$logname.log")"
  fi
}

reap() {  # kill -9 the job's processes still alive after a fault case (pids from the ranks' pid files)
  local f pid
  for f in "$1"/pid-rank*.json; do
    [ -f "$f" ] || continue
    pid="$(grep -o '"pid": [0-9]*' "$f" | grep -o '[0-9]*$')"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  done
  return 0
}

shm_list() { find /dev/shm -maxdepth 1 -name 'conccl-*' 2>/dev/null | sort; }

fault_kill() {  # NP WHERE
  local np="$1" where="$2" name="kill_$2" d
  wanted "fault/$name" || return 0
  local cfg="[np=$np ${LIBS_MAIN[0]} default]"
  d="$OUTDIR/fault/$name-np$np"
  rm -rf "$d" && mkdir -p "$d"
  shm_list >"$d/shm-before"
  set_env "${LIBS_MAIN[0]}" default
  if ! bounded "fault-$name-np$np" 60 "${ENVCMD[@]}" "$PY" -m torch.distributed.run --standalone \
      --nproc-per-node "$np" tests/torch/fault_cases.py "${ARGS_EXTRA[@]}" --mode kill --where "$where" \
      --result-dir "$d" --timeout-s 30; then
    record SKIP "fault/$name $cfg" 0 "time budget spent"
    return
  fi
  local line
  line="$("$PY" tests/torch/fault_cases.py --verdict kill --result-dir "$d" --world "$np" --where "$where" \
    --name "$name" --shm-before "$d/shm-before" 2>&1 | grep -a '^CASE ' | tail -1)"
  reap "$d"
  line="${line#CASE "$name" }"
  [ -n "$line" ] || line="FAIL the verdict printed nothing"
  record "${line%% *}" "fault/$name $cfg" "$SECS" "${line#* } (job rc $RC: a rank was killed, non-zero expected)"
}

fault_abort() {  # NP WHERE API
  local np="$1" where="$2" api="$3" name="abort_$2_$3" d
  wanted "fault/$name" || return 0
  local cfg="[np=$np ${LIBS_MAIN[0]} default]"
  d="$OUTDIR/fault/$name-np$np"
  rm -rf "$d" && mkdir -p "$d"
  set_env "${LIBS_MAIN[0]}" default
  if ! bounded "fault-$name-np$np" 60 "${ENVCMD[@]}" "$PY" -m torch.distributed.run --standalone \
      --nproc-per-node "$np" tests/torch/fault_cases.py "${ARGS_EXTRA[@]}" --mode abort --where "$where" \
      --abort-api "$api" --result-dir "$d" --timeout-s 30; then
    record SKIP "fault/$name $cfg" 0 "time budget spent"
    return
  fi
  local line
  line="$("$PY" tests/torch/fault_cases.py --verdict abort --result-dir "$d" --world "$np" --where "$where" \
    --name "$name" --job-rc "$RC" 2>&1 | grep -a '^CASE ' | tail -1)"
  line="${line#CASE "$name" }"
  [ -n "$line" ] || line="FAIL the verdict printed nothing"
  record "${line%% *}" "fault/$name $cfg" "$SECS" "${line#* }"
}

fault_intruder() {  # NP
  local np="$1" name="intruder" d ipid irc=0
  wanted "fault/$name" || return 0
  local cfg="[np=$np ${LIBS_MAIN[0]} default]"
  if [ "$SMOKE_CPU" = 1 ]; then
    record SKIP "fault/$name $cfg" 0 "no conccl bootstrap without the drop-in"
    return
  fi
  d="$OUTDIR/fault/$name-np$np"
  rm -rf "$d" && mkdir -p "$d"
  if [ "$(left_s)" -lt 45 ]; then
    record SKIP "fault/$name $cfg" 0 "time budget spent"
    return
  fi
  "$PY" tests/torch/bootstrap_intruder.py --nranks "$np" --duration-s 50 --out "$d/intruder.json" \
    --ready-file "$d/ready" --stop-file "$d/stop" >"$logs/fault-intruder-np$np-helper.log" 2>&1 &
  ipid=$!
  for _ in $(seq 50); do [ -f "$d/ready" ] && break; sleep 0.1; done
  set_env "${LIBS_MAIN[0]}" default
  bounded "fault-intruder-np$np" 40 "${ENVCMD[@]}" "$PY" -m torch.distributed.run --standalone \
    --nproc-per-node "$np" tests/torch/fault_cases.py "${ARGS_EXTRA[@]}" --mode intruder-job --no-device-id \
    --stagger-s 2 --timeout-s 30
  touch "$d/stop"
  wait "$ipid" || irc=$?
  local job ok=PASS
  job="$(grep -a -o 'CASE intruder_job \(PASS\|FAIL\).*' "$logs/fault-intruder-np$np.log" | head -1 | cut -c1-300)"
  [ "$RC" -eq 0 ] && [[ "$job" == "CASE intruder_job PASS"* ]] || ok=FAIL
  [ "$irc" -eq 0 ] || ok=FAIL
  record "$ok" "fault/$name $cfg" "$SECS" "job rc $RC (${job:-no CASE line: $(why "$logs/fault-intruder-np$np.log")}); \
intruder rc $irc: $(tail -1 "$logs/fault-intruder-np$np-helper.log" | cut -c1-400)"
}

# ---------------------------------------------------------------------------------------------------------------
{
  echo "date: $(date -u +%FT%TZ)  budget ${BUDGET_S}s  NPS=$NPS  ALLOCS=$ALLOCS  smoke-cpu=$SMOKE_CPU"
  echo "shim: $SHIM ($(sha256sum "$SHIM" 2>/dev/null | cut -c1-16))  real NCCL dir: ${NCCL_LIB:-none}"
  nvidia-smi -L 2>/dev/null
  "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
  # The stage's stamp (scripts/gpu-build.sh): the device copy's git metadata can name an older commit.
  cat "$(dirname "$SHIM")/../BUILD_INFO" 2>/dev/null || git -C "$root" log --oneline -1 2>/dev/null
} | tee "$OUTDIR/environment.txt"
if [ "$SMOKE_CPU" != 1 ] && [ ! -f "$SHIM" ]; then
  record FAIL preflight 0 "no drop-in at $SHIM (scripts/gpu-build.sh stages gpu-stage/lib/libconccl_nccl.so)"
  echo "$npass passed, $nfail failed, $nskip skipped"
  exit 1
fi
wl_extra=()
[ "$SMOKE_CPU" = 1 ] && wl_extra=(--compile-backend aot_eager)

matrix() {  # NP: the workloads, ordering and pipeline runs of one process count, drop-in and reference
  local np="$1" lib ord_env
  for lib in "${LIBS_MAIN[@]}" $REF_LIB; do
    torchrun_cases workloads.py "$np" "$lib" default 150 "$WORKLOAD_CASES" --cases "$WORKLOAD_CASES" "${wl_extra[@]}"
    ord_env=""
    [ "$lib" = conccl ] && ord_env="CONCCL_TIMEOUT_MS=$ORDERING_TIMEOUT_MS"
    RUN_ENV="$ord_env" torchrun_cases ordering.py "$np" "$lib" default 75 "$ORDERING_CASES" \
      --cases "$ORDERING_CASES" --timeout-s 60
    torchrun_cases pipeline_ddp.py "$np" "$lib" default 90 gpipe,1f1b
    # CUDA streams only: not in the CPU smoke run.
    [ "$SMOKE_CPU" = 1 ] || torchrun_cases stream_waits.py "$np" "$lib" default 75 "$STREAM_WAIT_CASES" --limit-s 10
  done
}

# Priority order (BUDGET_S skips what comes last): NP=2, skew, faults at NP=2, then NP=4 and its faults, then the
# allocator variants.
has_np() { [[ " $NPS " == *" $1 "* ]]; }
has_np 2 && matrix 2

# Host time under skew: NP=2 (the peer, rank 1, is late).
if wanted skew; then
  for skew_alloc in $SKEW_ALLOCS; do
    for lib in "${LIBS_MAIN[@]}" $REF_LIB; do
      skew_out="$OUTDIR/skew-$lib.jsonl"
      [ "$skew_alloc" = default ] || skew_out="$OUTDIR/skew-$lib-$skew_alloc.jsonl"
      skew_args=(--calls "$SKEW_CALLS" --burst "$SKEW_BURST" --out "$skew_out")
      sleep_s=2
      # The 20 us bound is for calls back to back (the peer two or more calls behind); a call after an idle wait is
      # bounded like the C API's test (CONCCL_TEST_MAX_COLD_HOST_US): the real NCCL's own time there is 67-115 us.
      skew_bound="$SKEW_ASSERT_US"
      [ "$SKEW_BURST" = 1 ] && skew_bound="$SKEW_COLD_ASSERT_US"
      [ "$lib" = conccl ] && skew_args+=(--assert-max-us "$skew_bound")
      [ "$lib" = nccl ] && sleep_s=1  # NCCL never waits for the peer: 1 s shows it as well, in half the time
      [ "$SMOKE_CPU" = 1 ] && { sleep_s=0.2; skew_args+=(--max-mib 64); }
      rm -f "$skew_out"
      NCCL_VIA_DROPIN=0
      [ "$lib" = nccl ] && [ "$SKEW_NCCL_TIMED" = 1 ] && NCCL_VIA_DROPIN=1
      torchrun_cases skew_host_time.py 2 "$lib" "$skew_alloc" 180 skew "${skew_args[@]}" --sleep-s "$sleep_s"
      NCCL_VIA_DROPIN=0
      grep -h -A12 '^host time per call' "$logs/skew_host_time-np2-$lib-$skew_alloc.log" 2>/dev/null >>"$summary"
    done
  done
fi

# Fault cases, through the drop-in only (the 1 s bound and the clean-up are conccl's promises).
if has_np 2; then
  fault_kill 2 host
  fault_kill 2 gpu
  fault_abort 2 host c10d
  fault_abort 2 host pg
  fault_abort 2 gpu auto
  fault_intruder 2
fi
for np in $NPS; do
  [ "$np" = 2 ] && continue
  matrix "$np"
  fault_kill "$np" host
  fault_intruder "$np"
done

# The allocator variants (ALLOCS): expandable segments (VMM memory) under both names of the variable, the register hook.
for alloc in $ALLOCS; do
  wl_cases="$WORKLOAD_CASES"
  # PyTorch's register hook and register_mem_pool together deregister a pool's segments twice: PyTorch 2.11 terminates
  # in ~MemPool ("Segment ... is not registered on ncclComm_"), whatever the library. mem_pool runs without the hook.
  [ "$alloc" = hook ] && wl_cases="$(echo ",$WORKLOAD_CASES," | sed 's/,mem_pool,/,/; s/^,//; s/,$//')"
  for np in $NPS; do
    for s in $ALLOC_SCRIPTS; do
      case "$s" in
        workloads) torchrun_cases workloads.py "$np" "${LIBS_MAIN[0]}" "$alloc" 150 "$wl_cases" \
                     --cases "$wl_cases" "${wl_extra[@]}" ;;
        ordering) RUN_ENV="CONCCL_TIMEOUT_MS=$ORDERING_TIMEOUT_MS" torchrun_cases ordering.py "$np" \
                    "${LIBS_MAIN[0]}" "$alloc" 90 "$ORDERING_CASES" --cases "$ORDERING_CASES" --timeout-s 60 ;;
        pipeline) torchrun_cases pipeline_ddp.py "$np" "${LIBS_MAIN[0]}" "$alloc" 90 gpipe,1f1b ;;
      esac
    done
  done
done

total=$(($(date +%s) - start))
echo "== tests/torch/run_all.sh: ${total}s of ${BUDGET_S}s; logs in $logs ==" | tee -a "$summary"
echo "$npass passed, $nfail failed, $nskip skipped" | tee -a "$summary"
[ "$nfail" -eq 0 ]
