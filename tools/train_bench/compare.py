#!/usr/bin/env python3
"""Compares training-benchmark runs (the JSON-lines files train_bench.py --out wrote): a table, a plot of step time
per backend with the losses overlaid, and a loss check against a reference run.

    python tools/train_bench/compare.py nccl.jsonl conccl.jsonl --reference nccl --plot runs.png

Loss check: every run with the reference's configuration (model, layers, seq, global batch, steps, seed, lr) is
compared step by step with the reference (default: the first run given):
  - step 0 within --rtol0 (default 1e-3) relative: the same weights and the same data; only the forward's kernels and
    the reporting all-reduce can differ, and neither should move the loss more than rounding;
  - every step within --rtol (default 2e-2) relative. Why not tighter: FSDP2 reduce-scatters the gradients in fp32
    (MixedPrecisionPolicy.reduce_dtype) but the backends sum the ranks' contributions in different orders (NCCL's ring
    or tree, conccl's kernels in one pass: docs/nccl-shim.md, "Numerics"), so the gradients differ by fp32 rounding;
    the parameters are cast to bf16 (8 bits of significand) for every forward, and AdamW divides each gradient by
    its running RMS, so tiny gradient differences become update differences of the order of the learning rate in
    coordinates whose gradients are near zero. Run-to-run differences of plain NCCL itself (non-deterministic
    attention backward) are of the same order. A wrong reduction (a missing rank, a wrong scale) moves the loss by
    far more than 2% within a few steps.
Exit status: 0 all compared runs within tolerance, 1 a mismatch, 2 bad input.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats import format_table, read_records, summaries  # noqa: E402

# Runs are comparable when they train the same model on the same global batches: the world size, the mesh and
# compile do not change the function computed (a single-process run of the whole global batch is a reference for any
# world size: each rank's loss is the mean over its equal share and FSDP averages the gradients over the ranks).
CONFIG_KEYS = ("model", "seq", "tokens_per_step", "steps", "warmup", "seed", "lr")


def config_of(run: Dict) -> tuple:
    return tuple(run.get(k) for k in CONFIG_KEYS) + (run["shape"]["n_layers"],)


def compare_losses(ref: Sequence[float], run: Sequence[float], rtol: float, rtol0: float) -> Dict:
    """{"ok", "max_rel", "worst_step", "step0_rel", "reason"}: step 0 within rtol0, every step within rtol."""
    if len(ref) != len(run):
        return {"ok": False, "max_rel": None, "worst_step": None, "step0_rel": None,
                "reason": f"{len(run)} losses vs the reference's {len(ref)}"}
    rels = [abs(a - b) / max(abs(a), 1e-12) for a, b in zip(ref, run)]
    worst = max(range(len(rels)), key=rels.__getitem__)
    bad0 = rels[0] > rtol0
    ok = not bad0 and rels[worst] <= rtol and all(x == x for x in run)  # NaN fails
    if ok:
        reason = f"max relative difference {rels[worst]:.2e} (step {worst}) <= {rtol:g}"
    elif bad0:
        reason = f"step 0 differs by {rels[0]:.2e} > {rtol0:g}"
    else:
        reason = f"step {worst} differs by {rels[worst]:.2e} > {rtol:g}"
    return {"ok": ok, "max_rel": rels[worst], "worst_step": worst, "step0_rel": rels[0], "reason": reason}


def load(paths: Sequence[str]) -> List[Dict]:
    runs = []
    for path in paths:
        with open(path) as f:
            found = summaries(read_records(f))
        if not found:
            raise ValueError(f"{path}: no summary record (did the run finish?)")
        for r in found:
            r.setdefault("_file", path)
        runs.extend(found)
    return runs


def check(runs: List[Dict], reference: Optional[str], rtol: float, rtol0: float) -> List[Dict]:
    """One result per run that has a reference of its configuration (the run labelled `reference`, default the
    first run of each configuration)."""
    results = []
    refs: Dict[tuple, Dict] = {}
    for r in runs:
        key = config_of(r)
        if key not in refs and (reference is None or r["label"] == reference):
            refs[key] = r
    for r in runs:
        ref = refs.get(config_of(r))
        if ref is None or ref is r:
            continue
        res = compare_losses(ref["losses"], r["losses"], rtol, rtol0)
        res.update(label=r["label"], reference=ref["label"], world=r["world"])
        results.append(res)
    return results


def plot(runs: List[Dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(13, 4.5))
    for r in runs:
        name = f"{r['label']} (world {r['world']}, tp {r['tp']})"
        times = [t * 1e3 for t in r["step_times_s"]]
        ax_t.plot(range(len(times)), times, marker=".", label=name)
        ax_l.plot(range(len(r["losses"])), r["losses"], label=name, alpha=0.8)
    shared = any(not r.get("performance_figures", True) for r in runs)
    ax_t.set(xlabel="measured step", ylabel="step time (ms)",
             title="step time" + (" (ranks share a GPU: not performance figures)" if shared else ""))
    ax_l.set(xlabel="step (warm-up included)", ylabel="loss", title="loss per step")
    for ax in (ax_t, ax_l):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", help="JSON-lines files of train_bench.py --out")
    p.add_argument("--reference", help="label of the reference run (default: the first run of each configuration)")
    p.add_argument("--rtol", type=float, default=2e-2)
    p.add_argument("--rtol0", type=float, default=1e-3)
    p.add_argument("--plot", help="PNG: step times per backend and the losses overlaid (matplotlib)")
    a = p.parse_args(argv)
    try:
        runs = load(a.files)
    except (OSError, ValueError, KeyError) as e:
        print(f"compare: {e}", file=sys.stderr)
        return 2
    print(format_table(runs))
    results = check(runs, a.reference, a.rtol, a.rtol0)
    for res in results:
        print(f"losses {res['label']} vs {res['reference']} (world {res['world']}): "
              f"{'OK' if res['ok'] else 'MISMATCH'}: {res['reason']}")
    if not results:
        print("losses: no two runs of one configuration to compare")
    if a.plot:
        try:
            plot(runs, a.plot)
            print(f"plot: {a.plot}")
        except ImportError:
            print("plot: matplotlib not installed, skipped", file=sys.stderr)
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
