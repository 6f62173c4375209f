#!/usr/bin/env python3
"""Bar chart of the fraction of ideal overlap F per scenario and strategy, from conccl-c3's JSON.

Usage: plot_c3.py RESULTS.json OUT.png

F = (S - 1) / (S_ideal - 1): 0% is no better than serial, 100% is perfect overlap, negative is worse than
serial (definitions in /work/shared/FACTS.md and docs/c3.md). Rows without numbers (skipped strategies)
are left out; the class (G-long / C-long / GC-equal) is appended to each scenario label.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display on GPU servers
import matplotlib.pyplot as plt  # noqa: E402  (must follow the backend choice)


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = [r for r in doc.get("results", []) if r.get("status") == "ok" and r.get("F") is not None]
    return doc, rows


def plot(doc, rows, out):
    scenarios, strategies, label = [], [], {}
    for r in rows:
        if r["scenario"] not in scenarios:
            scenarios.append(r["scenario"])
            label[r["scenario"]] = f'{r["scenario"]}\n({r.get("class") or "?"}, {r.get("gemm_bound", "?")}-bound)'
        if r["strategy"] not in strategies:
            strategies.append(r["strategy"])
    value = {(r["scenario"], r["strategy"]): 100.0 * r["F"] for r in rows}

    width = 0.8 / max(1, len(strategies))
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(scenarios) * max(1, len(strategies)) * 0.35 + 3), 6))
    for i, strategy in enumerate(strategies):
        xs = [j + (i - (len(strategies) - 1) / 2) * width for j in range(len(scenarios))]
        ys = [value.get((s, strategy), float("nan")) for s in scenarios]
        ax.bar(xs, ys, width, label=strategy)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.axhline(100, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(scenarios)))
    ax.set_xticklabels([label[s] for s in scenarios], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("F = fraction of ideal overlap (%)")
    title = f'conccl-c3: {doc.get("device", "?")}, {doc.get("ranks", "?")} ranks ({doc.get("mode", "c3")})'
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=min(4, max(1, len(strategies))))
    for caveat in doc.get("caveats", [])[:2]:  # the one-GPU caveat belongs on the figure, not only in the log
        fig.text(0.01, 0.005 + 0.02 * doc["caveats"].index(caveat), "caveat: " + caveat, fontsize=6, color="darkred")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
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
