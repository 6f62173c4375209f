"""Host time under skew (issue 24 item 6, case 5): how long a call holds rank 0's Python thread while its peer is late.

Before every measured round the ranks meet on a gloo barrier; then rank 1 (the peer) sleeps --sleep-s (2 s) and
makes the call, while rank 0 makes it at once and measures time.perf_counter() around the call only (async_op=True:
the call's return, not its completion; completion is waited for afterwards, untimed). Ranks 2.. call at once too.
With --burst B every rank makes B calls back to back per round (rank 0 times each): PyTorch's CPU run-ahead, and
the shape of the C API's test (test_gpu_multiprocess CallsDoNotWaitForLatePeers: 9 calls while the peer sleeps). With
B = 1 (the default) every timed call is the first after an idle wait on the barrier (cold caches and a sleeping
thread: the slowest case). With --realloc every round first frees the op's tensors back to CUDA (empty_cache) and
makes new ones, with one untimed call on time: the peers then retire their old allocations, which the library
unmaps while the late round runs (how an earlier op's buffers retire in a real job).
NCCL enqueues and returns whatever the peer does (tens of us); a library that waits on the host for its peer holds
the thread for the whole sleep.

Ops (largest buffer): all_reduce 1 MiB, 64 MiB, 1 GiB (--max-mib to leave it out), all_gather_into_tensor 64 MiB
(output), reduce_scatter_tensor 64 MiB (input), broadcast 64 MiB (root 0), all_to_all_single uneven 1 MiB in all,
isend 1 MiB (rank 0 -> 1; the peer's irecv comes late). One untimed call of each op first (communicators, mappings).

Two times per call: the Python call's (what PyTorch's user sees: PyTorch's own work plus the library's), and, through
the drop-in, conccl's own share of it: the time rank 0's thread spent inside the drop-in's NCCL calls during that
Python call (concclNcclShimTakeCallNs, conccl/nccl_shim.h; absent on plain NCCL).

Where a slow call's time goes outside the library: each timed call's CPU time on rank 0's thread (a call slower
in wall time than in CPU time waited or was descheduled; one slower in both ran on a slower CPU), and per round the
CPU the thread ran on before and after its calls, and the whole process's CPU time during them (the rest is other
threads': a thread spinning beside the caller, perhaps on its core's sibling).

Output: a table on stdout (rank 0), and one JSON object per op to --out (JSON lines): op, bytes, calls, p50_us,
max_us, samples_us (the Python call), cpu_samples_us (its thread CPU time), dropin_p50_us, dropin_max_us,
dropin_samples_us, dropin_calls (NCCL calls per Python call), rounds (per round: cpu_before / cpu_after, wall_us,
thread_cpu_us, process_cpu_us of its calls), sleep_s, world, lib (conccl / NCCL, from the shim's line), tag.
--assert-max-us X makes the run fail unless every op's p50 (or --assert-stat max) is at most X us (the target on
conccl: 20), of the drop-in's own time where the drop-in is loaded, of the Python call's otherwise (--assert-on).

    LD_PRELOAD=.../libconccl_nccl.so python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        tests/torch/skew_host_time.py --out skew-conccl.jsonl --assert-max-us 20
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/skew_host_time.py --sim-hosts \\
        --out skew-nccl.jsonl
"""
import ctypes
import json
import os
import statistics
import sys
import time

import tcommon

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

MIB = 1 << 20


def ops_list(ctx, max_mib):
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    f32 = torch.float32
    out = []

    def add(name, nbytes, make):
        if nbytes <= max_mib * MIB:
            out.append((name, nbytes, make))

    for mib in (1, 64, 1024):
        def mk_ar(n=mib * MIB // 4):
            t = torch.ones(n, dtype=f32, device=dev)
            return lambda: dist.all_reduce(t, async_op=True)
        add(f"all_reduce {mib} MiB", mib * MIB, mk_ar)

    def mk_ag():
        n = 64 * MIB // 4
        o = torch.empty(n, dtype=f32, device=dev)
        i = torch.ones(n // world, dtype=f32, device=dev)
        return lambda: dist.all_gather_into_tensor(o, i, async_op=True)
    add("all_gather_into_tensor 64 MiB", 64 * MIB, mk_ag)

    def mk_rs():
        n = 64 * MIB // 4
        i = torch.ones(n, dtype=f32, device=dev)
        o = torch.empty(n // world, dtype=f32, device=dev)
        return lambda: dist.reduce_scatter_tensor(o, i, async_op=True)
    add("reduce_scatter_tensor 64 MiB", 64 * MIB, mk_rs)

    def mk_bc():
        t = torch.ones(64 * MIB // 4, dtype=f32, device=dev)
        return lambda: dist.broadcast(t, src=0, async_op=True)
    add("broadcast 64 MiB", 64 * MIB, mk_bc)

    def mk_a2a():
        total = MIB // 4  # elements each rank sends, uneven over peers
        w = [p + 1 for p in range(world)]
        split = [[total * ((r + p) % world + 1) // sum(w) for p in range(world)] for r in range(world)]
        i = torch.ones(sum(split[rank]), dtype=f32, device=dev)
        o = torch.empty(sum(split[p][rank] for p in range(world)), dtype=f32, device=dev)
        return lambda: dist.all_to_all_single(o, i, output_split_sizes=[split[p][rank] for p in range(world)],
                                              input_split_sizes=split[rank], async_op=True)
    add("all_to_all_single uneven 1 MiB", MIB, mk_a2a)

    def mk_p2p():
        t = torch.ones(MIB // 4, dtype=f32, device=dev)
        if rank == 0:
            return lambda: dist.isend(t, 1)
        if rank == 1:
            return lambda: dist.irecv(t, 0)
        return None  # ranks 2..: not involved
    add("isend 1 MiB", MIB, mk_p2p)
    return out


def dropin_clock():
    """The drop-in's per-thread host-time counter (a function returning ns since its previous call), or None."""
    try:
        fn = ctypes.CDLL(None).concclNcclShimTakeCallNs  # LD_PRELOAD put the drop-in's symbols in the global scope
    except (AttributeError, OSError):
        return None
    fn.restype = ctypes.c_uint64
    fn.argtypes = [ctypes.POINTER(ctypes.c_uint64)]
    return fn


def this_cpu():
    """The CPU the calling thread last ran on (field 39 of /proc/thread-self/stat), or -1 where it cannot be read."""
    try:
        with open("/proc/thread-self/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])  # fields after the command's ")" start at field 3
    except (OSError, ValueError, IndexError):
        return -1


def main():
    p = tcommon.base_parser(__doc__, timeout_s=300)
    p.add_argument("--sleep-s", type=float, default=2.0, help="how late the peer (rank 1) is, before every call")
    p.add_argument("--calls", type=int, default=3, help="measured rounds per op")
    p.add_argument("--burst", type=int, default=1, help="calls per round, back to back (each one timed)")
    p.add_argument("--realloc", action="store_true",
                   help="new tensors (after empty_cache) and one untimed on-time call before every round")
    p.add_argument("--max-mib", type=int, default=1024, help="leave out ops whose largest buffer is larger")
    p.add_argument("--ops", default="", help="comma list of op-name prefixes to run (default: all)")
    p.add_argument("--out", help="JSON lines, one per op (rank 0)")
    p.add_argument("--assert-max-us", type=float, default=None,
                   help="fail unless every op's --assert-stat is at most this many microseconds")
    p.add_argument("--assert-stat", choices=["p50", "max"], default="p50")
    p.add_argument("--assert-on", choices=["auto", "python", "dropin"], default="auto",
                   help="which time --assert-max-us bounds: the drop-in's own (auto: when loaded) or the Python call's")
    args = p.parse_args()
    ctx = tcommon.setup(args)
    rank, world = ctx.rank, ctx.world
    if world < 2:
        raise SystemExit("needs 2 or more ranks")
    lib = ",".join(ctx.paths) or ("NCCL" if not tcommon.shim_loaded() else "?")
    if args.backend == "gloo":
        lib = "gloo"
    wanted = [s.strip() for s in args.ops.split(",") if s.strip()]
    clock = dropin_clock()
    assert_on = args.assert_on if args.assert_on != "auto" else ("dropin" if clock is not None else "python")
    if assert_on == "dropin" and clock is None:
        raise SystemExit("--assert-on dropin: the drop-in is not loaded (no concclNcclShimTakeCallNs)")
    ncalls = ctypes.c_uint64(0)
    results = []
    t_all = time.perf_counter()
    for name, nbytes, make in ops_list(ctx, args.max_mib):
        if wanted and not any(name.startswith(w) for w in wanted):
            continue
        call = make()
        samples = []
        cpu_samples = []  # the thread's CPU time per measured call
        rounds = []
        dropin = []  # (us, NCCL calls) per measured call
        err = None
        try:
            for k in range(args.calls + 1):  # round 0: one untimed warm-up call, peer not late
                if args.realloc and k > 0 and call is not None:
                    call = None
                    if ctx.cuda:
                        torch.cuda.empty_cache()
                    call = make()
                    dist.barrier(group=ctx.cpu_pg)
                    work = call()  # on time, untimed: carries the retirements of the freed tensors
                    if work is not None:
                        work.wait()
                    ctx.sync()
                dist.barrier(group=ctx.cpu_pg)
                if call is None:
                    continue
                if rank == 1 and k > 0:
                    time.sleep(args.sleep_s)
                works = []
                cpu_before = this_cpu()
                round_t0, round_thread0, round_proc0 = time.perf_counter(), time.thread_time(), time.process_time()
                for _ in range(args.burst if k > 0 else 1):
                    if clock is not None:
                        clock(None)  # reset: count only this call's NCCL calls
                    c0 = time.thread_time()
                    t0 = time.perf_counter()
                    works.append(call())
                    t1 = time.perf_counter()
                    c1 = time.thread_time()
                    inside_ns = clock(ctypes.byref(ncalls)) if clock is not None else None
                    if k > 0:
                        samples.append((t1 - t0) * 1e6)
                        cpu_samples.append((c1 - c0) * 1e6)
                        if inside_ns is not None:
                            dropin.append((inside_ns / 1e3, int(ncalls.value)))
                if k > 0:
                    rounds.append({"cpu_before": cpu_before, "cpu_after": this_cpu(),
                                   "wall_us": round((time.perf_counter() - round_t0) * 1e6, 1),
                                   "thread_cpu_us": round((time.thread_time() - round_thread0) * 1e6, 1),
                                   "process_cpu_us": round((time.process_time() - round_proc0) * 1e6, 1)})
                for work in works:
                    if work is not None:
                        work.wait()
                ctx.sync()
        except Exception as e:  # noqa: BLE001 - reported per op, the run goes on
            err = f"{type(e).__name__}: {str(e)[:300]}"
        dist.barrier(group=ctx.cpu_pg)
        del call
        if rank == 0:
            row = {"op": name, "bytes": nbytes, "calls": len(samples), "burst": args.burst, "sleep_s": args.sleep_s,
                   "world": world,
                   "lib": lib, "tag": args.tag,
                   "p50_us": round(statistics.median(samples), 1) if samples else None,
                   "max_us": round(max(samples), 1) if samples else None,
                   "samples_us": [round(s, 1) for s in samples],
                   "cpu_p50_us": round(statistics.median(cpu_samples), 1) if cpu_samples else None,
                   "cpu_samples_us": [round(c, 1) for c in cpu_samples], "rounds": rounds}
            if dropin:
                us = [d[0] for d in dropin]
                row.update({"dropin_p50_us": round(statistics.median(us), 1), "dropin_max_us": round(max(us), 1),
                            "dropin_samples_us": [round(u, 1) for u in us],
                            "dropin_calls": [d[1] for d in dropin]})
            if err:
                row["error"] = err
            results.append(row)
            print(f"  {name:32s} p50 {row['p50_us'] if samples else '-':>12} us  max "
                  f"{row['max_us'] if samples else '-':>12} us  drop-in p50 {row.get('dropin_p50_us', '-'):>10} us"
                  f"{('  ERROR ' + err) if err else ''}", flush=True)
        if ctx.cuda:
            torch.cuda.empty_cache()
    failed = 0
    if rank == 0:
        alloc = os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or "default allocator"
        print(f"\nhost time per call on rank 0, peer {args.sleep_s:g} s late, {world} ranks, {lib}, {alloc}, "
              f"{args.burst} call(s) per round:")
        print("| op | Python call p50 us | max us | its thread CPU p50 us | drop-in's own p50 us | max us | calls |\n"
              "|---|---|---|---|---|---|---|")
        for r in results:
            print(f"| {r['op']} | {r['p50_us']} | {r['max_us']} | {r['cpu_p50_us']} | {r.get('dropin_p50_us', '-')} | "
                  f"{r.get('dropin_max_us', '-')} | {r['calls']} |")
        if args.out:
            with open(args.out, "a") as f:
                for r in results:
                    f.write(json.dumps(r) + "\n")
        bad = [r for r in results if r.get("error") or r["p50_us"] is None]
        key = ("dropin_" if assert_on == "dropin" else "") + f"{args.assert_stat}_us"
        if args.assert_max_us is not None:
            bad += [r for r in results if r.get(key) is None or r[key] > args.assert_max_us]
        for r in bad:
            print(f"FAIL {r['op']}: " + (r.get("error") or
                                         f"{key} {r.get(key)} us > {args.assert_max_us} us"), flush=True)
        failed = len(bad)
        summary = ", ".join(f"{r['op'].split(' ')[0]}{'/' + r['op'].split(' ')[-2] if r['op'][-3:] == 'MiB' else ''}"
                            f"={r['p50_us']}" + (f" ({r['dropin_p50_us']} in the drop-in)" if 'dropin_p50_us' in r
                                                 else "") for r in results)
        verdict = "PASS" if not failed else "FAIL"
        print(f"CASE skew {verdict} {time.perf_counter() - t_all:.1f}s p50 us: {summary}"
              + (f" (assert {key} <= {args.assert_max_us:g} us)" if args.assert_max_us is not None else ""), flush=True)
    t = torch.tensor([failed], dtype=torch.int64)
    dist.broadcast(t, src=0, group=ctx.cpu_pg)
    return tcommon.finish(ctx, int(t.item()))


if __name__ == "__main__":
    sys.exit(main())
