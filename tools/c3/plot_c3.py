#!/usr/bin/env python3
"""Bar charts of conccl-c3's JSON: the overlap ratio R and the fraction of ideal F per scenario and strategy.

Usage: plot_c3.py RESULTS.json OUT.png

R = T_c3 / max(T_g, T_c) (1.00 = perfect overlap at the baseline's speed; lower is better) on top, and
F = (S - 1) / (S_ideal - 1) (0% = no better than serial, 100% = perfect overlap) below, both against the
*baseline* collective (NCCL's) for every strategy (definitions in /work/shared/FACTS.md and docs/c3.md).
Bars are the medians over the interleaved rounds; the error bars span the rounds' min..max. Rows without
numbers (skipped strategies) are left out; the class (G-long / C-long / GC-equal) is appended to each label.
An auto row is drawn as "auto" (its pick is in the JSON's "choice").
"""
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")  # no display on GPU servers
import matplotlib.pyplot as plt  # noqa: E402  (must follow the backend choice)


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = [r for r in doc.get("results", []) if r.get("status") == "ok" and r.get("F") is not None]
    return doc, rows


def spread(row, key, scale=1.0):
    """(median, lower error, upper error) of a field, from the row's median and its min/max over the rounds."""
    mid = row.get(key)
    lo = (row.get("min") or {}).get(key, mid)
    hi = (row.get("max") or {}).get(key, mid)
    if mid is None:
        return float("nan"), 0.0, 0.0
    lo = mid if lo is None else lo
    hi = mid if hi is None else hi
    return scale * mid, scale * max(0.0, mid - lo), scale * max(0.0, hi - mid)


def bars(ax, scenarios, strategies, rows, key, scale):
    width = 0.8 / max(1, len(strategies))
    by = {(r["scenario"], r["strategy"]): r for r in rows}
    for i, strategy in enumerate(strategies):
        xs, ys, lo, hi = [], [], [], []
        for j, s in enumerate(scenarios):
            r = by.get((s, strategy))
            if r is None:
                continue
            mid, down, up = spread(r, key, scale)
            if math.isnan(mid):
                continue
            xs.append(j + (i - (len(strategies) - 1) / 2) * width)
            ys.append(mid)
            lo.append(down)
            hi.append(up)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=1.5, error_kw={"linewidth": 0.6}, label=strategy)


def plot(doc, rows, out):
    scenarios, strategies, label = [], [], {}
    for r in rows:
        if r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])
            label[r["scenario"]] = f'{r["scenario"]}\n({r.get("class") or "?"}, {r.get("gemm_bound", "?")}-bound)'
        if r["strategy"] not in strategies:
            strategies.append(r["strategy"])

    width_in = max(8.0, 0.9 * len(scenarios) * max(1, len(strategies)) * 0.35 + 3)
    fig, (ax_r, ax_f) = plt.subplots(2, 1, figsize=(width_in, 10), sharex=True)
    bars(ax_r, scenarios, strategies, rows, "R", 1.0)
    ax_r.axhline(1.0, color="black", linewidth=0.8)
    r_values = [r["R"] for r in rows if r.get("R") is not None]
    if r_values and min(r_values) >= 0.85:  # R lives near 1: start the axis there so differences show
        ax_r.set_ylim(bottom=0.8)
    ax_r.set_ylabel("R = T_c3 / max(T_g, T_c baseline)  (lower is better)")
    bars(ax_f, scenarios, strategies, rows, "F", 100.0)
    ax_f.axhline(0, color="black", linewidth=0.8)
    ax_f.axhline(100, color="grey", linewidth=0.8, linestyle="--")
    ax_f.set_ylabel("F = fraction of ideal overlap (%)")
    ax_f.set_xticks(range(len(scenarios)))
    ax_f.set_xticklabels([label[s] for s in scenarios], rotation=60, ha="right", fontsize=7)
    rounds = doc.get("rounds", "?")
    baseline = doc.get("baseline", "?")
    ax_r.set_title(f'conccl-c3: {doc.get("device", "?")}, {doc.get("ranks", "?")} ranks ({doc.get("mode", "c3")})\n'
                   f'baseline T_c: {baseline}; median of {rounds} rounds, error bars span min..max')
    ax_r.legend(fontsize=8, ncol=min(4, max(1, len(strategies))))
    for k, caveat in enumerate(doc.get("caveats", [])[:2]):  # the one-GPU caveat belongs on the figure too
        fig.text(0.01, 0.005 + 0.015 * k, "caveat: " + caveat, fontsize=6, color="darkred")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(out, dpi=120)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    doc, rows = load(argv[1])
    if not rows:
        print(f"plot_c3.py: no results with F in {argv[1]}", file=sys.stderr)
        return 1
    plot(doc, rows, argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
