#!/usr/bin/env python3
"""Turns the tuning sweep of scripts/gpu.sh tune (tune.jsonl: conccl-bench JSON lines, each tagged with its step,
e.g. {"tune": "tune-ss262144", ...}) into a row of the per-GPU-count defaults (src/core/tuned_defaults.cc,
docs/tuning.md). Standard library only: it runs on the GPU machine.

For each knob swept (tune-ss*: singleStreamBytes, tune-mc*: minChunkBytes, tune-lanes*: lanes, tune-small*:
smallMessageBytes), every value is scored over the points (collective, size, in place) that every value of that knob
measured: the geometric mean of its time over the best time at each point (1.00 = best everywhere). The lowest score
wins; values within --tie of it lose to the one already in the table (a sweep's noise is no reason to move a default).
Knobs not swept keep the table's value, given with --current.

Usage: pick_defaults.py --gpus N [--current lanes=2,singleStreamBytes=4194304,...] [--tie 0.02] tune.jsonl
"""

import argparse
import json
import math
import sys
from typing import Dict, List, Optional, Tuple

# Step tag prefix -> the table's knob.
KNOBS = {
    "tune-lanes": "lanes",
    "tune-ss": "singleStreamBytes",
    "tune-mc": "minChunkBytes",
    "tune-small": "smallMessageBytes",
}
ORDER = ["lanes", "singleStreamBytes", "minChunkBytes", "smallMessageBytes"]
# The 2-GPU row (src/core/tuned_defaults.cc) as of 2026-12-01: what a knob keeps when the sweep did not vary it.
CURRENT = {"lanes": 2, "singleStreamBytes": 4 << 20, "minChunkBytes": 8 << 20, "smallMessageBytes": 64 << 10}

Point = Tuple[str, int, bool]


def knob_of(tag: str) -> Optional[Tuple[str, int]]:
    """("singleStreamBytes", 262144) for "tune-ss262144"; None for steps that are not table knobs."""
    for prefix, knob in sorted(KNOBS.items(), key=lambda kv: -len(kv[0])):
        rest = tag[len(prefix):]
        if tag.startswith(prefix) and rest.isdigit():
            return knob, int(rest)
    return None


def read(lines) -> Tuple[Dict[str, Dict[int, Dict[Point, float]]], List[str], Optional[str]]:
    """knob -> value -> point -> time_us; the steps that are not knobs; the sweep's date (first metadata line)."""
    times: Dict[str, Dict[int, Dict[Point, float]]] = {}
    others: List[str] = []
    date = None
    for line in lines:
        line = line.strip()
        if not line:
            continue
        row = json.loads(line)
        tag = row.get("tune", "")
        if date is None and row.get("date"):
            date = row["date"]
        if "coll" not in row or not isinstance(row.get("time_us"), (int, float)) or row["time_us"] <= 0:
            continue
        if row.get("backend", "conccl") != "conccl":
            continue
        k = knob_of(tag)
        if k is None:
            if tag not in others:
                others.append(tag)
            continue
        knob, value = k
        point = (row["coll"], int(row["size"]), bool(row.get("in_place", False)))
        times.setdefault(knob, {}).setdefault(value, {})[point] = float(row["time_us"])
    return times, others, date


def score(by_value: Dict[int, Dict[Point, float]]) -> Tuple[Dict[int, float], int]:
    """value -> geomean over the common points of time / best time there; and the number of common points."""
    common = None
    for pts in by_value.values():
        common = set(pts) if common is None else common & set(pts)
    common = sorted(common or [])
    scores = {}
    for value, pts in by_value.items():
        logs = [math.log(pts[p] / min(v[p] for v in by_value.values())) for p in common]
        scores[value] = math.exp(sum(logs) / len(logs)) if logs else float("nan")
    return scores, len(common)


def pick(scores: Dict[int, float], current: int, tie: float) -> int:
    best = min(scores, key=lambda v: scores[v])
    if current in scores and scores[current] <= scores[best] * (1.0 + tie):
        return current
    return best


def bytes_text(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def cxx_size(n: int) -> str:
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} * kMiB"
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return f"{n >> 10} * kKiB"
    return str(n)


def report(times, others, date, gpus: int, current: Dict[str, int], tie: float) -> List[str]:
    out = []
    row = dict(current)
    for knob in ORDER:
        if knob not in times:
            out.append(f"{knob}: not swept, keeps {current[knob]}")
            continue
        scores, npoints = score(times[knob])
        if len(scores) < 2 or npoints == 0:
            out.append(f"{knob}: {len(scores)} value(s) over {npoints} common point(s): nothing to compare, keeps "
                       f"{current[knob]}")
            continue
        chosen = pick(scores, current[knob], tie)
        row[knob] = chosen
        shown = ", ".join(f"{v if knob == 'lanes' else bytes_text(v)} x{scores[v]:.3f}" for v in sorted(scores))
        out.append(f"{knob}: {chosen} over {npoints} points ({shown}; x1.000 = fastest at every point)")
    if others:
        out.append("steps that are not table knobs: " + ", ".join(others))
    when = (date or "date unknown")[:10]
    out.append("row for src/core/tuned_defaults.cc:")
    out.append(f'  {{{gpus}, {row["lanes"]}, {cxx_size(row["singleStreamBytes"])}, {cxx_size(row["minChunkBytes"])}, '
               f'{cxx_size(row["smallMessageBytes"])}, "{gpus} GPUs, {when}: scripts/gpu.sh tune sweep '
               f'(docs/results/...)"}},')
    return out


def parse_current(text: str) -> Dict[str, int]:
    current = dict(CURRENT)
    for item in filter(None, (text or "").split(",")):
        name, _, value = item.partition("=")
        if name not in current or not value.isdigit():
            raise SystemExit(f"--current: '{item}' is not one of {', '.join(ORDER)} = an integer")
        current[name] = int(value)
    return current


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tune", help="tune.jsonl from scripts/gpu.sh tune")
    ap.add_argument("--gpus", type=int, required=True, help="GPUs the sweep ran across (the row's GPU count)")
    ap.add_argument("--current", default="", help="the table's values for knobs the sweep did not vary")
    ap.add_argument("--tie", type=float, default=0.02, help="score margin within which the current value stays")
    args = ap.parse_args(argv)
    if args.gpus < 1:
        raise SystemExit("--gpus must be at least 1")
    with open(args.tune) as f:
        times, others, date = read(f)
    if not times:
        print(f"{args.tune}: no tune-lanes / tune-ss / tune-mc / tune-small rows", file=sys.stderr)
        return 1
    for line in report(times, others, date, args.gpus, parse_current(args.current), args.tie):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
