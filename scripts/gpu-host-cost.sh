#!/usr/bin/env bash
# Host cost per call, A/B: conccl-bench rows with one environment setting against another, in the same call of the
# GPU machine (run THERE from the repo root with gpu-stage/ carried). Prints one line per (variant, mode,
# collective, size, placement): time_us and host_us (host enqueue per rank and call), and writes the JSON lines.
#   VARIANTS  space-separated NAME=ENV pairs, ENV a comma list of VAR:VALUE ("spin0=CONCCL_RENDEZVOUS_SPIN_US:0")
#   MODES     "g t" (-g 2: one thread drives both ranks; -t 2: a thread per rank)
#   COLLS, MINB, MAXB, ITERS, DEVICES (default: 0,1 with 2+ GPUs, else 0,0)
set -u
source "$(dirname "${BASH_SOURCE[0]}")/gpu-env.sh"
bin="${STAGE:-gpu-stage}/bin"
OUT="${OUT:-$PWD/gpu-host-cost-out}"
mkdir -p "$OUT"
ngpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
devices="${DEVICES:-$([ "${ngpus:-0}" -ge 2 ] && echo 0,1 || echo 0,0)}"
colls="${COLLS:-all_gather,all_reduce,reduce_scatter}"
rc=0
for variant in ${VARIANTS:-default=}; do
  name="${variant%%=*}"
  envs=()
  IFS=',' read -ra kv <<<"${variant#*=}"
  for pair in "${kv[@]}"; do [ -n "$pair" ] && envs+=("${pair%%:*}=${pair#*:}"); done
  for mode in ${MODES:-g t}; do
    if [ "$mode" = g ]; then shape=(-g 2 -t 1); else shape=(-g 1 -t 2); fi
    json="$OUT/host-cost-$name-$mode.jsonl"
    env "${envs[@]}" timeout 150 "$bin/conccl-bench" --backend conccl "${shape[@]}" --devices "$devices" \
      -b "${MINB:-8}" -e "${MAXB:-8M}" -f 8 -n "${ITERS:-100}" -w 20 --coll "$colls" --json "$json" \
      >"$OUT/host-cost-$name-$mode.log" 2>&1 || { echo "host-cost $name $mode: rc=$?"; rc=1; }
    python3 - "$json" "$name" "$mode" <<'PY'
import json, sys
path, name, mode = sys.argv[1:4]
try:
    rows = [json.loads(l) for l in open(path) if l.strip()]
except OSError:
    sys.exit(0)
for r in rows:
    if r.get("metadata"):
        continue
    print(f"{name}\t{mode}\t{r['coll']}\t{r['size']}\t{'in' if r['in_place'] else 'out'}\t"
          f"{r['time_us']:.1f}\t{r.get('host_us') or 0:.1f}\t{r.get('wrong')}")
PY
  done
done >"$OUT/host-cost.tsv"
# One line per (mode, collective, size), out of place: time_us / host_us of every variant side by side.
python3 - "$OUT/host-cost.tsv" <<'PY'
import collections, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
variants = list(dict.fromkeys(r[0] for r in rows))
table = collections.OrderedDict()
wrong = 0
for name, mode, coll, size, place, t, h, w in rows:
    wrong += 0 if w in ("0", "None") else 1
    if place != "out":
        continue
    table.setdefault((mode, coll, int(size)), {})[name] = (float(t), float(h))
print("mode coll            size     " + "  ".join(f"{v + ' t/host_us':>22s}" for v in variants))
for (mode, coll, size), cells in table.items():
    line = f"-{mode}  {coll:15s} {size:>9d} "
    for v in variants:
        t, h = cells.get(v, (float("nan"), float("nan")))
        line += f"  {t:12.1f} /{h:8.1f}"
    print(line)
print(f"rows with wrong results: {wrong}")
PY
exit $rc
