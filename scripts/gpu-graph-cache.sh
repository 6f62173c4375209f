#!/usr/bin/env bash
# Issue 11 item 3 on the GPU machine: the graph cache's GPU tests, then conccl-bench with the cache off and on in one
# run, host time (host_us) and time per call side by side (docs/cuda-executor.md, "Graph cache").
# Run from the repo root with gpu-stage/ carried:
#   TARGETS="test_gpu_graph_cache test_gpu_no_hang test_gpu_graphs test_gpu_soak test_gpu_multiprocess \
#            conccl_mp_worker conccl-bench" scripts/gpu-build.sh    # CPU machine
#   PHASES=tests bash scripts/gpu-graph-cache.sh            # GPU machine, one device call (~3-5 min)
#   PHASES="bench mp" bash scripts/gpu-graph-cache.sh       # a second call (~3-5 min): each call is limited to 600 s
# Env: DEVICES (ranks' devices for the bench; default 0,1 with 2 GPUs, else 0,0: host_us is meaningful either way),
#      BENCH_MAX (default 64M), PHASES (default "tests bench mp"), OUT (the device tool's folder: the bench's JSON
#      lines, compare.txt and logs-<phases>.tgz land there, at most 4 files, within the tool's 8).
# Exits non-zero when a step fails or times out.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"

stage=gpu-stage/bin
out="${OUT:-/tmp/gpu-graph-cache}"
logs="$(mktemp -d /tmp/gpu-graph-cache-logs.XXXXXX)"
mkdir -p "$out"
export CUDA_DEVICE_MAX_CONNECTIONS="${CUDA_DEVICE_MAX_CONNECTIONS:-32}"
export LD_LIBRARY_PATH="/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib:${LD_LIBRARY_PATH:-}"
ngpu="$(nvidia-smi -L 2>/dev/null | wc -l)"
devices="${DEVICES:-$([ "$ngpu" -ge 2 ] && echo 0,1 || echo 0,0)}"
max="${BENCH_MAX:-64M}"
phases="${PHASES:-tests bench mp}"
rc=0

step() {  # step NAME LIMIT_S COMMAND...: runs with a deadline, keeps the log, prints its tail
  local name="$1" limit="$2"
  shift 2
  echo "== $name: $*"
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local r=$?
  tail -n 6 "$logs/$name.log"
  if [ "$r" -ne 0 ]; then
    echo "FAILED (exit $r): $name"
    rc=1
  fi
}

if [[ " $phases " == *" tests "* ]]; then
  step graph-cache-tests 240 "$stage/test_gpu_graph_cache"
  step no-hang 120 "$stage/test_gpu_no_hang"
  step graphs 120 "$stage/test_gpu_graphs"
  # The soak's us/call (1 MiB AllReduce on 3 ranks, the same buffers call after call) with the cache off and on.
  for cache in 0 64; do
    CONCCL_GRAPH_CACHE=$cache CONCCL_SOAK_CALLS=2000 step "soak-cache$cache" 120 "$stage/test_gpu_soak"
    grep -h "us/call" "$logs/soak-cache$cache.log" | sed "s/^/cache $cache: /"
  done
fi

if [[ " $phases " == *" bench "* ]]; then
  # NCCL beside conccl only where each rank has its own GPU (NCCL refuses two ranks on one GPU).
  backends=conccl
  [ "$devices" = "0,1" ] && backends=conccl,nccl
  for cache in 0 64; do
    b=conccl
    [ "$cache" = 64 ] && b="$backends"
    CONCCL_GRAPH_CACHE=$cache step "bench-cache$cache" 200 "$stage/conccl-bench" --backend "$b" -g 2 \
      --devices "$devices" -b 128K -e "$max" -f 2 --coll all -n 50 -w 5 -c 1 --json "$out/bench-cache$cache.jsonl"
  done
  py="$(command -v python3 || echo /opt/torch/.venv/bin/python)"
  "$py" - "$out/bench-cache0.jsonl" "$out/bench-cache64.jsonl" <<'EOF' | tee "$out/compare.txt"
import json, sys
def rows(path):
    out = {}
    for line in open(path):
        j = json.loads(line)
        if "coll" not in j or j.get("time_us") is None:
            continue
        out[(j["backend"], j["coll"], j["size"], j["in_place"])] = j
    return out
off, on = rows(sys.argv[1]), rows(sys.argv[2])
print("%-15s %10s %3s | %9s %9s | %9s %9s | %9s %8s | %5s" % ("coll", "bytes", "ip", "host off", "host on",
      "time off", "time on", "NCCL", "on/NCCL", "wrong"))
worst_host, below = 0.0, 0
for key in sorted(k for k in on if k[0] == "conccl"):
    _, coll, size, ip = key
    a, b = off.get(key), on[key]
    nccl = on.get(("nccl", coll, size, ip))
    ratio = nccl["time_us"] / b["time_us"] if nccl else None
    worst_host = max(worst_host, b["host_us"])
    below += ratio is not None and ratio < 0.9
    print("%-15s %10d %3s | %9.1f %9.1f | %9.1f %9.1f | %9s %8s | %5s" % (
        coll, size, "ip" if ip else "", a["host_us"] if a else float("nan"), b["host_us"],
        a["time_us"] if a else float("nan"), b["time_us"], "%.1f" % nccl["time_us"] if nccl else "-",
        "%.2fx" % ratio if ratio else "-", b.get("wrong")))
print("cache on: max host_us %.1f (bound 10); points below 0.9x NCCL: %d" % (worst_host, below))
EOF
fi

if [[ " $phases " == *" mp "* ]]; then
  # Several processes, copy-engine path only: the worker's hot path prints its host time per call.
  for cache in 0 64; do
    CONCCL_SMALL_MESSAGE_BYTES=0 CONCCL_GRAPH_CACHE=$cache step "multiprocess-cache$cache" 200 \
      "$stage/test_gpu_multiprocess" --gtest_filter='*EveryCollective*:*Symmetric*'
    grep -h "host time per call" "$logs/multiprocess-cache$cache.log" | sed "s/^/cache $cache: /" | head -8
  done
fi

tar czf "$out/logs-${phases// /-}.tgz" -C "$logs" .
echo "gpu-graph-cache: logs in $out/logs-${phases// /-}.tgz"
exit "$rc"
