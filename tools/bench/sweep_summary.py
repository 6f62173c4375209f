#!/usr/bin/env python3
"""The short summary scripts/gpu.sh sweep prints last: conccl against NCCL per collective, from conccl-bench JSON
lines (both backends in one run) and, beside them, NVIDIA's nccl-tests. Standard library only.

  sweep_summary.py --bench g=bench-g.jsonl --bench t=bench-t.jsonl --nccl-tests g=nccl-tests-g.txt ...

speed = t_NCCL / t_conccl per (size, variant): 1.00 = NCCL's time, below 0.90 flagged (issue 11's bar).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_results as br  # noqa: E402


def _labelled(items):
    out = []
    for item in items or []:
        label, _, path = item.partition("=")
        out.append((label, path) if path else (os.path.basename(label), label))
    return out


def _bw(p):
    return "-" if p is None or p.busbw is None else f"{p.busbw:.1f}"


def summarize(label, points, nt_points, base="nccl", mine="conccl"):
    lines = []
    a, b = br.index(points, mine), br.index(points, base)
    nt = br.index(nt_points, "nccl-tests")
    colls = [c for c in br.COLL_ORDER if any(k[0] == c for k in a)]
    lines.append(f"== mode {label}: speed = t_{base} / t_{mine} (oop and in-place points); busbw GB/s {mine} / {base}"
                 " / nccl-tests")
    lines.append(f"{'collective':<15} {'geomean':>7} {'min':>5} {'pts':>4}  {'busbw @64M':<20} "
                 f"{'busbw @max':<26} below 0.9x")
    all_ratios = []
    for coll in colls:
        ratios, below = [], []
        for key, p in sorted(a.items()):
            q = b.get(key)
            if key[0] != coll or q is None or not p.time_us or not q.time_us:
                continue
            r = q.time_us / p.time_us
            ratios.append(r)
            if r < 0.9 and br.human_size(key[1]) not in below:
                below.append(br.human_size(key[1]))  # out of place or in place
        all_ratios += ratios
        sizes = sorted({k[1] for k in a if k[0] == coll})
        big = sizes[-1] if sizes else 0

        def at(size):
            k = (coll, size, False)
            return f"{_bw(a.get(k))}/{_bw(b.get(k))}/{_bw(nt.get(k))}"

        lines.append(f"{coll:<15} {br.geomean(ratios):7.2f} {min(ratios, default=float('nan')):5.2f} {len(ratios):4d}  "
                     f"{at(64 << 20):<20} {br.human_size(big) + ' ' + at(big):<26} {' '.join(below) or '-'}")
    n_ok = sum(r >= 0.9 for r in all_ratios)
    lines.append(f"all: geomean {br.geomean(all_ratios):.2f}, {n_ok}/{len(all_ratios)} points >= 0.9x"
                 " (below 0.9x: sizes where either variant is)")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", action="append", help="LABEL=conccl-bench JSON lines (one per mode)")
    ap.add_argument("--nccl-tests", action="append", help="LABEL=nccl-tests log (same labels as --bench)")
    args = ap.parse_args(argv)
    nt = {}
    for label, path in _labelled(args.nccl_tests):
        if os.path.exists(path):
            nt.setdefault(label, []).extend(br.read_nccl_tests_file(path))
    for label, path in _labelled(args.bench):
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            print(f"== mode {label}: no results ({path})")
            continue
        print("\n".join(summarize(label, br.read_conccl_bench_file(path), nt.get(label, []))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
