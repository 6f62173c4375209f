#!/usr/bin/env python3
"""Tables of README.md from the files of this folder (conccl-bench JSON lines, conccl-c3 JSON).

Usage: python3 tabulate.py [DIR]   (DIR defaults to the folder of this script); prints Markdown.
"""
import json
import os
import statistics
import sys

D = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def rows(name):
    out = []
    with open(os.path.join(D, name)) as f:
        for line in f:
            r = json.loads(line)
            if not r.get("metadata"):
                out.append(r)
    return out


def size_text(b):
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div and b % div == 0:
            return f"{b // div} {unit}"
    return f"{b} B"


def f1(x):
    return "-" if x is None else f"{x:.1f}"


def bench_table(name, colls, backends, in_place=False):
    data = rows(name)
    key = {(r["coll"], r["backend"], r["size"], r["in_place"]): r for r in data}
    for coll in colls:
        sizes = sorted({r["size"] for r in data if r["coll"] == coll})
        b = " / ".join(backends)
        print(f"\n{coll} ({'in-place' if in_place else 'out-of-place'}), time us {b} | busbw GB/s {b}\n")
        print(f"| size | time (us) {b} | busbw (GB/s) {b} | conccl busbw / nccl | conccl path |")
        print("|---|---|---|---|---|")
        for s in sizes:
            rs = [key.get((coll, be, s, in_place)) for be in backends]
            if any(r is None for r in rs):
                continue
            t = " / ".join(f1(r["time_us"]) for r in rs)
            bw = " / ".join(f1(r["busbw_GBps"]) for r in rs)
            c, n = rs[0]["busbw_GBps"], rs[1]["busbw_GBps"]
            ratio = f"{c / n:.2f}" if c and n else "-"
            path = "1-CTA kernel" if rs[0]["sm_fallback"] else (
                f"copy engines + {rs[0]['sms']} reduce CTAs" if rs[0]["sms"] else "copy engines")
            print(f"| {size_text(s)} | {t} | {bw} | {ratio} | {path} |")


def wrong_rows(name):
    print(f"\nrows with wrong values in {name}:")
    for r in rows(name):
        if r.get("wrong") or r.get("error"):
            print(f"  {r['backend']} {r['coll']} {size_text(r['size'])} in_place={r['in_place']} "
                  f"wrong={r.get('wrong')} count={r['count']} error={r.get('error')}")


def ranges(name, colls, backend, lo, hi):
    """Range of out-of-place time over sizes lo..hi (inclusive), per collective."""
    print(f"\n{name}: {backend} out-of-place time, sizes {size_text(lo)}..{size_text(hi)}")
    for coll in colls:
        ts = [r["time_us"] for r in rows(name)
              if r["coll"] == coll and r["backend"] == backend and not r["in_place"] and lo <= r["size"] <= hi]
        if ts:
            print(f"  {coll}: {min(ts):.1f}-{max(ts):.1f} us ({len(ts)} sizes)")


def small_path(name, colls):
    print(f"\n{name}: conccl rows on the small-message kernel (sm_fallback), out-of-place and in-place, size > 0")
    for coll in colls:
        ts = [r["time_us"] for r in rows(name)
              if r["coll"] == coll and r["backend"] == "conccl" and r["sm_fallback"] and r["size"] > 0
              and r["time_us"] is not None]
        sz = sorted({r["size"] for r in rows(name)
                     if r["coll"] == coll and r["backend"] == "conccl" and r["sm_fallback"] and r["size"] > 0})
        if ts:
            print(f"  {coll}: {min(ts):.1f}-{max(ts):.1f} us, sizes {size_text(sz[0])}..{size_text(sz[-1])}")


def lanes():
    print("\nlanes sweep (conccl only), busbw GB/s out-of-place / in-place, time us out-of-place")
    print("\n| collective | size | lanes 1: busbw oop / ip, time | lanes 4: busbw oop / ip, time |")
    print("|---|---|---|---|")
    l1, l4 = rows("bench-lanes1.jsonl"), rows("bench-lanes4.jsonl")
    k4 = {(r["coll"], r["size"], r["in_place"]): r for r in l4}
    for r in l1:
        if r["in_place"]:
            continue
        r1ip = next(x for x in l1 if x["coll"] == r["coll"] and x["size"] == r["size"] and x["in_place"])
        a, b = k4[(r["coll"], r["size"], False)], k4[(r["coll"], r["size"], True)]
        print(f"| {r['coll']} | {size_text(r['size'])} | {f1(r['busbw_GBps'])} / {f1(r1ip['busbw_GBps'])}, "
              f"{f1(r['time_us'])} | {f1(a['busbw_GBps'])} / {f1(b['busbw_GBps'])}, {f1(a['time_us'])} |")


def c3():
    doc = json.load(open(os.path.join(D, "c3.json")))
    strategies = ["serial", "nccl", "nccl+RP", "nccl-ce", "conccl", "conccl+RP"]
    F = {}
    cls = {}
    for r in doc["results"]:
        if r["status"] == "ok" and r.get("F") is not None:
            F[(r["scenario"], r["strategy"])] = 100.0 * r["F"]
            if r["strategy"] == "conccl":  # class depends on the strategy's own T_c: the conccl row's
                cls[r["scenario"]] = (r["class"], r["collective"]["kind"], r["collective"]["bytes"])
    scen = list(dict.fromkeys(r["scenario"] for r in doc["results"]))
    print(f"\nC3 F (%), {doc['device']}, ranks {doc['ranks']}; caveats: {doc['caveats']}\n")
    print("| scenario | class | coll | " + " | ".join(strategies) + " |")
    print("|---|---|---|" + "---|" * len(strategies))
    for s in scen:
        c, kind, byts = cls[s]
        vals = " | ".join(f"{F[(s, st)]:.0f}" if (s, st) in F else "skip" for st in strategies)
        print(f"| {s} | {c} | {kind} {size_text(byts)} | {vals} |")
    med = " | ".join(f"{statistics.median([F[(s, st)] for s in scen if (s, st) in F]):.0f}"
                     f" (n={sum((s, st) in F for s in scen)})" for st in strategies)
    print(f"| **median** | | | {med} |")
    for a, b in (("conccl", "nccl"), ("conccl", "nccl-ce"), ("conccl+RP", "nccl+RP"), ("conccl", "serial")):
        both = [s for s in scen if (s, a) in F and (s, b) in F]
        wins = sum(F[(s, a)] > F[(s, b)] for s in both)
        print(f"\n{a} F > {b} F in {wins} of {len(both)} scenarios")
    for st in ("nccl", "nccl-ce", "conccl", "conccl+RP"):
        cs = [r["coll_slowdown"] for r in doc["results"] if r["status"] == "ok" and r["strategy"] == st
              and r["class"] == "G-long" and r["collective"]["kind"] != "reduce-scatter"]
        gs = [r["gemm_slowdown"] for r in doc["results"] if r["status"] == "ok" and r["strategy"] == st
              and r["class"] == "G-long" and r["collective"]["kind"] != "reduce-scatter"]
        print(f"G-long all-gather/all-to-all rows, {st}: c-slow {min(cs):.2f}-{max(cs):.2f}x, "
              f"g-slow {min(gs):.2f}-{max(gs):.2f}x over {len(cs)}")
    late = [r["T_c_overlap_ms"] - r["T_g_overlap_ms"] for r in doc["results"] if r["status"] == "ok"
            and r["strategy"] == "conccl" and r["class"] == "G-long" and r["collective"]["kind"] != "reduce-scatter"]
    after = [x for x in late if x >= 0]
    print(f"conccl G-long ag/a2a rows where the collective ends after the GEMM: {len(after)} of {len(late)}, "
          f"by {min(after):.3f}-{max(after):.3f} ms")
    ser = [F[(s, "serial")] for s in scen if (s, "serial") in F]
    print(f"serial F range (should be ~0): {min(ser):.0f}..{max(ser):.0f}")
    for kind in ("all-gather", "reduce-scatter", "all-to-all"):
        for st in ("nccl", "conccl", "conccl+RP"):
            v = [F[(s, st)] for s in scen if cls[s][1] == kind and (s, st) in F]
            print(f"  {kind} {st}: median F {statistics.median(v):.0f}% over {len(v)}")


def kernel_bench():
    def load(name):
        out = {}
        with open(os.path.join(D, name)) as f:
            for line in f:
                if line.startswith("#json "):
                    r = json.loads(line[6:])
                    if r["bench"] == "latency":
                        out[(r["coll"], r["bytes"])] = r
        return out
    k, ce = load("kernel-bench-small-path.txt"), load("kernel-bench-ce-only.txt")
    print("\nkernel bench, 2 ranks on GPUs 0 and 1: small-message kernel (default) / copy engines only")
    print("\n| collective | size | time per call (us) | enqueue per call per rank (us) | graph replay per call (us) |")
    print("|---|---|---|---|---|")
    for (coll, b), r in k.items():
        if b not in (8, 8192, 32768, 131072, 1048576):
            continue
        c = ce[(coll, b)]
        print(f"| {coll} | {size_text(b)} | {r['time_us']:.1f} / {c['time_us']:.1f} | "
              f"{r['enqueue_us_per_rank']:.1f} / {c['enqueue_us_per_rank']:.1f} | "
              f"{r['graph_time_us']:.1f} / {c['graph_time_us']:.1f} |")
    for name, d in (("small path", k), ("ce only", ce)):
        for coll in sorted({c for c, _ in d}):
            e = [d[(coll, b)]["enqueue_us_per_rank"] for c, b in d if c == coll and b <= 32768]
            t = [d[(coll, b)]["time_us"] for c, b in d if c == coll and b <= 32768]
            print(f"  {name} {coll} 8 B..32 KiB: enqueue {min(e):.1f}-{max(e):.1f}, time {min(t):.1f}-{max(t):.1f}")


if __name__ == "__main__":
    big = ["all_gather", "all_to_all", "reduce_scatter", "all_reduce"]
    rest = ["broadcast", "reduce", "gather", "scatter", "sendrecv"]
    bench_table("bench-main.jsonl", big, ["conccl", "nccl", "nccl-ce"])
    bench_table("bench-rest.jsonl", rest, ["conccl", "nccl"])
    wrong_rows("bench-main.jsonl")
    wrong_rows("bench-rest.jsonl")
    for be in ("conccl", "nccl", "nccl-ce"):
        ranges("bench-main.jsonl", big, be, 128 << 10, 8 << 20)
    for be in ("conccl", "nccl"):
        ranges("bench-main.jsonl", big, be, 32, 32 << 10)
    small_path("bench-main.jsonl", big)
    small_path("bench-rest.jsonl", rest)
    lanes()
    kernel_bench()
    c3()
