"""Compares two loss curves written by shim_fsdp2.py (e.g. NCCL vs the conccl shim, or the shim vs the single-process
reference) and exits non-zero when they differ by more than rounding can explain.

    python tests/torch/compare_losses.py baseline.json candidate.json [--rtol 1e-3] [--rtol-first 1e-5]

Tolerance, and why:
  * Step 0 (--rtol-first, default 1e-5): the loss before any update depends only on the forward pass; the two runs
    differ there only by how the GEMMs are split (whole batch vs per-rank batches), i.e. by float32 rounding of
    O(1e-7) relative, amplified a little by the reductions inside the model. 1e-5 leaves two orders of margin.
  * Later steps (--rtol, default 1e-3, max over all steps of |a - b| / |b|): gradients reduced in a different
    order (conccl vs NCCL, sharded vs whole) differ by a few float32 ulps (~1e-7 relative) per step; SGD carries those
    differences forward and a small network amplifies them slowly, so after 50-100 steps two correct runs differ by
    well under 1e-4 in our expectation. A real fault is far larger: a rank's gradient missing from the average, a
    wrong divide factor or stale data changes the update by tens of percent, which moves the loss by more than 1e-2
    within a few steps. 1e-3 sits between the two with an order of magnitude of margin on each side; the measured
    maximum is printed so the margin can be checked (and the tolerance tightened) on the GPU.
    Measured on the CPU (gloo, 2 ranks vs the single-process reference, 50 steps, --dim 64 --layers 2): correct runs
    differ by at most 2.3e-6; the reference with the gradient halved (--divide-factor 4 against AVG) differs by 4.4e-2
    (5e-3 already at step 5).
Both files must describe the same training (world, steps, batch, model, seed, divide factor): that is checked first.
"""
import argparse
import json
import sys

SAME = ("world", "steps", "batch_per_rank", "seq", "vocab", "dim", "layers", "lr", "seed", "divide_factor")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("baseline")
    p.add_argument("candidate")
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--rtol-first", type=float, default=1e-5)
    p.add_argument("--min-steps", type=int, default=50)
    args = p.parse_args()
    with open(args.baseline) as f:
        a = json.load(f)
    with open(args.candidate) as f:
        b = json.load(f)
    problems = []
    for k in SAME:
        if a.get(k) != b.get(k):
            problems.append(f"setting {k} differs: {a.get(k)} vs {b.get(k)}")
    la, lb = a["losses"], b["losses"]
    if len(la) != len(lb) or len(la) < args.min_steps:
        problems.append(f"step counts {len(la)} and {len(lb)} (need equal and >= {args.min_steps})")
    n = min(len(la), len(lb))
    rel = [abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la[:n], lb[:n])]
    worst = max(range(n), key=lambda i: rel[i]) if n else 0
    if n and rel[0] > args.rtol_first:
        problems.append(f"step 0 differs by {rel[0]:.2e} relative (> {args.rtol_first:g}): {la[0]} vs {lb[0]}")
    if n and rel[worst] > args.rtol:
        problems.append(f"step {worst} differs by {rel[worst]:.2e} relative (> {args.rtol:g}): "
                        f"{la[worst]} vs {lb[worst]}")
    for x in la + lb:
        if x != x or x in (float("inf"), float("-inf")):
            problems.append("a loss is not finite")
            break
    name_a = f"{a.get('mode')}x{a.get('processes')}"
    name_b = f"{b.get('mode')}x{b.get('processes')}"
    print(f"compare {args.baseline} ({name_a}) vs {args.candidate} ({name_b}): {n} steps, "
          f"loss {la[0]:.5f}->{la[n - 1]:.5f} vs {lb[0]:.5f}->{lb[n - 1]:.5f}; max rel diff {rel[worst]:.2e} "
          f"at step {worst} (tolerance {args.rtol:g}), step 0 {rel[0]:.2e} (tolerance {args.rtol_first:g})")
    if la[n - 1] >= la[0]:
        print(f"note: the baseline's loss did not fall ({la[0]:.4f} -> {la[n - 1]:.4f}); the comparison still holds")
    for key in ("step_time_median_s", "step_time_p90_s"):
        if key in a and key in b:
            print(f"{key}: {a[key] * 1e3:.2f} ms vs {b[key] * 1e3:.2f} ms")
    for pr in problems:
        print(f"FAIL: {pr}")
    print("PASS" if not problems else "FAIL")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
