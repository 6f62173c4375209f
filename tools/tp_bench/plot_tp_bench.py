#!/usr/bin/env python3
"""conccl-tp-bench's JSON lines as a chart (and a summary on stdout): time / ideal per shape and strategy.

Usage: plot_tp_bench.py RESULTS.jsonl [OUT.png]

ideal = max(T_gemm, T_coll) of the shape (medians), so 1.00 is perfect overlap of the GEMM and its collective and
serial NCCL sits near (T_gemm + T_coll) / ideal. One panel per op (ag-gemm, gemm-rs), a group of bars per shape
(model, tokens), one bar per overlapping strategy, error bars from the iterations' min..max. Without OUT.png only
the summary is printed (no matplotlib needed): per strategy, the geometric mean of time / ideal and of the speedup
over serial-nccl over the shapes where it ran. Rows with an error, skipped shapes and rows without an ideal are
left out of both.
"""
import json
import math
import sys

STRATEGIES = ["serial-nccl", "nccl-split", "conccl-fused"]
OPS = ["ag-gemm", "gemm-rs"]


def load(path):
    """The rows with times and an ideal, from a JSON-lines file (blank lines ignored)."""
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            if "error" in row or "skipped" in row or row.get("time_over_ideal") is None:
                continue
            rows.append(row)
    return rows


def shape_key(row):
    return (row["model"], row["m"], row["n"], row["k"], row["tp"])


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows):
    """Lines of text: per op and strategy, the shapes measured and the geomeans."""
    lines = ["%-8s %-13s %6s %12s %16s" % ("op", "strategy", "shapes", "t/ideal", "vs serial-nccl")]
    for op in OPS:
        for s in STRATEGIES:
            mine = [r for r in rows if r["op"] == op and r["strategy"] == s]
            if not mine:
                continue
            ratio = geomean([r["time_over_ideal"] for r in mine])
            speedup = geomean([r.get("speedup_vs_serial_nccl") for r in mine])
            lines.append("%-8s %-13s %6d %12s %16s" % (op, s, len(mine), "%.3f" % ratio if ratio else "-",
                                                       "%.3fx" % speedup if speedup else "-"))
    return lines


def plot(rows, out):
    import matplotlib

    matplotlib.use("Agg")  # no display on GPU servers
    import matplotlib.pyplot as plt

    ops = [op for op in OPS if any(r["op"] == op for r in rows)]
    fig, axes = plt.subplots(len(ops), 1, figsize=(12, 4.5 * len(ops)), squeeze=False)
    for ax, op in zip(axes[:, 0], ops):
        mine = [r for r in rows if r["op"] == op]
        shapes = sorted({shape_key(r) for r in mine}, key=lambda k: (k[0], k[1]))
        width = 0.8 / len(STRATEGIES)
        for i, s in enumerate(STRATEGIES):
            xs, ys, lo, hi = [], [], [], []
            for x, key in enumerate(shapes):
                row = next((r for r in mine if shape_key(r) == key and r["strategy"] == s), None)
                if row is None:
                    continue
                ideal = row["ideal_ms"]
                t = row["time_ms"]
                xs.append(x + (i - (len(STRATEGIES) - 1) / 2) * width)
                ys.append(t["median"] / ideal)
                lo.append(max(0.0, (t["median"] - t["min"]) / ideal))
                hi.append(max(0.0, (t["max"] - t["median"]) / ideal))
            if xs:
                ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=s)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(["%s\n%d tok" % (k[0], k[1]) for k in shapes], fontsize=8)
        ax.set_ylabel("time / max(T_gemm, T_coll)")
        ax.set_title("%s, tp=%d (lower is better; 1.0 = perfect overlap)" % (op, shapes[0][4] if shapes else 0))
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write(__doc__)
        return 2
    rows = load(argv[1])
    print("\n".join(summary(rows)))
    if len(argv) == 3:
        if not rows:
            sys.stderr.write("plot_tp_bench.py: no rows with times and an ideal in %s\n" % argv[1])
            return 1
        plot(rows, argv[2])
        print("# wrote %s" % argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
