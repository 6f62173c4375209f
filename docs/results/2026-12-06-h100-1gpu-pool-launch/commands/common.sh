# Sourced by the call scripts here: the stage unpacked, the environment every run keeps, summary helpers.
set -u
OUT="${OUT:-/tmp/out}"
[ ! -f gpu-stage/bin.tgz ] || tar xzf gpu-stage/bin.tgz -C gpu-stage
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export LD_LIBRARY_PATH="$PWD/gpu-stage/lib:${LD_LIBRARY_PATH:-}"
s="$OUT/summary.txt"
say() { echo "$*" | tee -a "$s"; }
say "date: $(date -u +%FT%TZ) $(nvidia-smi -L | head -1 | cut -c1-40) stage: $(head -1 gpu-stage/BUILD_INFO)"
mp() {  # NAME LIMIT_S FILTER: test_gpu_multiprocess under a filter, summarised
  local t0=$SECONDS
  CONCCL_TEST_WORKER_LIMIT_S=60 timeout "$2" gpu-stage/bin/test_gpu_multiprocess --gtest_filter="$3" \
    >"$OUT/$1.log" 2>&1
  say "test_gpu_multiprocess $3: rc=$? ($((SECONDS - t0)) s)"
  grep -a -E '^\[  FAILED  \]|^\[  PASSED  \]' "$OUT/$1.log" | sort -u | head -20 | cut -c1-200 | tee -a "$s"
  say "tests finished: $(grep -a -c -E '^\[       OK \]' "$OUT/$1.log") OK, $(grep -a -c -E '^\[  FAILED  \] .*ms\)' \
"$OUT/$1.log") failed; last started: $(grep -a '^\[ RUN' "$OUT/$1.log" | tail -1)"
  grep -a -E "FAILED:|Failure|error:" "$OUT/$1.log" | grep -av "^\[" | sort | uniq -c | head -12 | cut -c1-300 |
    tee -a "$s"
}
torch_suite() {  # NAME TIMEOUT_S, then VAR=value settings for tests/torch/run_all.sh
  local name="$1" lim="$2" t0=$SECONDS
  shift 2
  env PY=/opt/torch/.venv/bin/python "$@" timeout "$lim" bash tests/torch/run_all.sh \
    gpu-stage/lib/libconccl_nccl.so "$OUT/$name" >"$OUT/$name.log" 2>&1
  say "tests/torch/run_all.sh $*: rc=$? ($((SECONDS - t0)) s)"
  grep -aE "^(FAIL|SKIP)|passed" "$OUT/$name.log" | cut -c1-300 | tee -a "$s"
  grep -a -A12 "^host time per call" "$OUT/$name/summary.txt" 2>/dev/null | cut -c1-200 | tee -a "$s"
}
laps_summary() {  # DIR: rank 0's median laps per call kind (CONCCL_HOST_LAPS=1) in a torch_suite run
  grep -rah "host laps of" "$1" | grep -a "rank 0 " | grep -av "idle wait" | sed 's/^.*host laps of //' |
    cut -c1-700 | tee -a "$s"
}
late4_laps() {  # NAME LABEL, then VAR=value settings: the 4-process late-call test, laps tallied, its bound lifted
  local name="$1" label="$2" t0=$SECONDS
  shift 2
  env "$@" CONCCL_HOST_LAPS=1 CONCCL_TEST_MAX_HOST_US=1e6 CONCCL_TEST_WORKER_LIMIT_S=60 timeout 100 \
    gpu-stage/bin/test_gpu_multiprocess --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/2' \
    >"$OUT/$name.log" 2>&1
  say "$label: rc=$? ($((SECONDS - t0)) s)"
}
pack() {  # every log and PyTorch folder into logs.tgz: the device tool returns only a few files
  ( cd "$OUT" && tar czf logs.tgz --exclude=summary.txt --exclude=logs.tgz * 2>/dev/null &&
      find . -mindepth 1 -maxdepth 1 ! -name summary.txt ! -name logs.tgz -exec rm -rf {} + )
}
