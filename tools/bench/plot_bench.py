#!/usr/bin/env python3
"""Bus bandwidth vs size, conccl against NCCL and NVIDIA's nccl-tests, per collective; and the markdown table for
docs/results.

  plot_bench.py --bench bench-g.jsonl --nccl-tests nccl-tests-g.txt --png busbw.png --md table.md

--bench: conccl-bench JSON lines (every backend in it is drawn); --nccl-tests: nccl-tests text output, one run per
file (named like all_gather_perf.log) or several after '# nccl-tests: <stem>_perf' lines (scripts/gpu.sh sweep).
Both may repeat; when -g and -t runs are mixed, the threaded ones are drawn as "<source> -t<N>" (the table keeps
the unthreaded ones: give one mode per --md). Out-of-place rows unless --in-place. The table has per collective and size: busbw of conccl, NCCL
and nccl-tests (GB/s), speed = t_NCCL / t_conccl, the SMs conccl-bench reports for conccl, and host_us of both.
Needs matplotlib only for --png.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_results as br  # noqa: E402


def load(bench_files, nt_files):
    points = []
    for path in bench_files or []:
        points += br.read_conccl_bench_file(path)
    for path in nt_files or []:
        points += br.read_nccl_tests_file(path)
    return br.tag_threads(points)


def series(points, in_place):
    """{coll: {source: [(size, busbw), ...] sorted by size}}."""
    out = {}
    for p in points:
        if p.in_place != in_place or p.busbw is None:
            continue
        out.setdefault(p.coll, {}).setdefault(p.source, []).append((p.size, p.busbw))
    for by_source in out.values():
        for pts in by_source.values():
            pts.sort()
    return out


STYLE = {"conccl": ("tab:red", "-", "o"), "nccl": ("tab:blue", "-", "s"), "nccl-ce": ("tab:green", "-", "^"),
         "nccl-tests": ("black", "--", None), "host": ("tab:gray", "-", "x")}


def plot(points, png, in_place=False, title=None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = series(points, in_place)
    colls = [c for c in br.COLL_ORDER if c in data] + sorted(c for c in data if c not in br.COLL_ORDER)
    if not colls:
        raise SystemExit("plot_bench: no rows to plot")
    ncols = min(3, len(colls))
    nrows = (len(colls) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.6 * nrows), squeeze=False)
    for ax, coll in zip(axes.flat, colls):
        for source in sorted(data[coll], key=lambda s: (list(STYLE).index(s.split()[0]) if s.split()[0] in STYLE
                                                        else 99, s)):
            xs, ys = zip(*data[coll][source])
            color, line, marker = STYLE.get(source.split()[0], (None, "-", "."))
            if " -t" in source:
                line = ":"
            ax.plot(xs, ys, line, color=color, marker=marker, markersize=3, linewidth=1.2, label=source)
        ax.set_xscale("log", base=2)
        ax.set_title(coll)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(colls):]:
        ax.axis("off")
    fig.suptitle(title or f"busbw vs size ({'in-place' if in_place else 'out-of-place'})")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)


def _f(value, fmt="{:.1f}"):
    return "-" if value is None else fmt.format(value)


def markdown(points, in_place=False, mine="conccl", base="nccl"):
    """Per collective, one row per size: busbw of `mine`, `base`, nccl-tests, speed t_base / t_mine, sms, host_us."""
    a, b = br.index(points, mine), br.index(points, base)
    nt = br.index(points, "nccl-tests")
    colls = [c for c in br.COLL_ORDER if any(k[0] == c for k in list(a) + list(b) + list(nt))]
    lines = [f"busbw in GB/s ({'in-place' if in_place else 'out-of-place'}); speed = t_{base} / t_{mine} "
             f"(1.00 = {base}'s time; below 0.90 in bold); sms: SMs {mine} occupied (conccl-bench's column); "
             f"host: us per rank and call ({mine} / {base}).", ""]
    for coll in colls:
        sizes = sorted({k[1] for k in list(a) + list(b) + list(nt) if k[0] == coll and k[2] == in_place})
        lines += [f"### {coll}", "",
                  f"| size | {mine} | {base} | nccl-tests | speed | sms | host us |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for size in sizes:
            k = (coll, size, in_place)
            p, q, r = a.get(k), b.get(k), nt.get(k)
            speed = "-"
            if p and q and p.time_us and q.time_us:
                ratio = q.time_us / p.time_us
                speed = f"**{ratio:.2f}**" if ratio < 0.9 else f"{ratio:.2f}"
            host = f"{_f(p.host_us if p else None)} / {_f(q.host_us if q else None)}"
            lines.append(f"| {br.human_size(size)} | {_f(p.busbw if p else None)} | {_f(q.busbw if q else None)} | "
                         f"{_f(r.busbw if r else None)} | {speed} | {(p.sms if p else None) or '-'} | {host} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", action="append", default=[], help="conccl-bench JSON lines")
    ap.add_argument("--nccl-tests", action="append", default=[], help="nccl-tests text output")
    ap.add_argument("--png", help="write the plot here")
    ap.add_argument("--md", help="write the markdown table here ('-': stdout)")
    ap.add_argument("--in-place", action="store_true", help="in-place rows instead of out-of-place")
    ap.add_argument("--title")
    args = ap.parse_args(argv)
    points = load(args.bench, args.nccl_tests)
    if args.png:
        plot(points, args.png, args.in_place, args.title)
    if args.md:
        text = markdown(points, args.in_place)
        if args.md == "-":
            print(text)
        else:
            with open(args.md, "w") as f:
                f.write(text + "\n")
    if not args.png and not args.md:
        ap.error("nothing to do: give --png and/or --md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
