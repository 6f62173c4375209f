#!/usr/bin/env bash
# Call 1 (2026-12-06, session 54): the pool bounce's copy kernel launched through the driver (stage 002ede3,
#   cuLaunchKernelEx on a function looked up once) against the runtime's launch (base be331a6, cudaLaunchKernelExC),
#   alternating on one machine: test_gpu_multiprocess CallsDoNotWaitForLatePeers/0 (2 processes, peers 2 s late),
#   bound relaxed to report only (CONCCL_TEST_MAX_HOST_US=1000), three times each; then the stage once with
#   CONCCL_HOST_LAPS=1 (where the host time of a pool call goes). Rank 0's p50 lines go to summary.txt.
source "$(dirname "$0")/common.sh"
mkdir -p /tmp/ab && tar xzf gpu-stage/base.tgz -C /tmp/ab
say "base: $(cat /tmp/ab/base-stage/BUILD_INFO)"
late() {  # NAME BIN_DIR [VAR=value...]
  local name="$1" dir="$2" t0=$SECONDS
  shift 2
  ( cd "$dir" && env "$@" CONCCL_TEST_MAX_HOST_US=1000 CONCCL_TEST_WORKER_LIMIT_S=60 timeout 100 \
      ./test_gpu_multiprocess --gtest_filter='Ranks/MultiProcess.CallsDoNotWaitForLatePeers/0' ) >"$OUT/$name.log" 2>&1
  say "$name: rc=$? ($((SECONDS - t0)) s)"
  awk '/^rank 0: host time per call/{f=1;next} f&&/^  /{print;next} f{exit}' "$OUT/$name.log" |
    grep -aE "pool memory|AllReduce (1|64|1024) MiB:" | sed -E 's/, max[^(]*\(9 calls:/ (/; s/; graph.*//' |
    cut -c1-150 | tee -a "$s"
}
for i in 1 2 3; do
  late "base$i" /tmp/ab/base-stage/bin
  late "new$i" gpu-stage/bin
done
late new-laps gpu-stage/bin CONCCL_HOST_LAPS=1
grep -a "host laps of" "$OUT/new-laps.log" | sed -E 's/.*host laps of //' | sort -u | cut -c1-400 | tee -a "$s"
pack
true
