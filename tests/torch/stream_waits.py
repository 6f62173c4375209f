"""Other streams waiting on a call whose peer is late (issue 24): the pattern of every PyTorch program.

A synchronous torch collective makes the current stream wait for the communicator's stream; FSDP, pipelining and
torch.compile then make more streams wait on the current one. Under NCCL that is always safe: the call's work is
enqueued before the call returns. A library that enqueues the call's work later (once a late peer arrives) puts it
behind those waits in whatever hardware queue (CUDA_DEVICE_MAX_CONNECTIONS) it shares with one of them, and the GPU
deadlocks. Here rank 0 calls at once; every other rank sleeps --late-s first; right after its call rank 0 makes
--streams fresh streams wait on the current stream and run a small kernel each; all of it must finish within
--limit-s (polled, so a deadlock fails the case instead of hanging the run: the process then exits at once, as the
GPU cannot be drained).

Cases: late_<kind> for kind in all_reduce_64m, all_reduce_1m, all_gather_64m, broadcast_64m, all_to_all_1m (uneven
splits), send_recv_16m (rank 0 isends to rank 1 and waits on the work; rank 1 irecvs late). Results are checked
against closed forms on seeded data.
"""
import os
import sys
import time

import tcommon
from tcommon import gen

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

MIB = 1 << 20
KINDS = ["all_reduce_64m", "all_reduce_1m", "all_gather_64m", "broadcast_64m", "all_to_all_1m", "send_recv_16m"]


def call(ctx, kind, g, it):
    """Makes the call (synchronous form where torch has one); returns a check function."""
    rank, world, dev, dt = ctx.rank, ctx.world, ctx.device, torch.float32
    mib = int(kind.rsplit("_", 1)[1][:-1])
    n = mib * MIB // 4
    tag = ("sw", kind, it)
    if kind.startswith("all_reduce"):
        t = gen(tag + (rank,), n, dt, dev)
        dist.all_reduce(t, group=g)

        def check():
            x64 = torch.stack([gen(tag + (r,), n, dt, dev).double() for r in range(world)])
            ctx.chk.sum_close(kind, t, x64.sum(0), x64.abs().sum(0), world, dt)
        return check
    if kind.startswith("all_gather"):
        m = n // world
        out = torch.empty(m * world, dtype=dt, device=dev)
        dist.all_gather_into_tensor(out, gen(tag + (rank,), m, dt, dev), group=g)
        return lambda: ctx.chk.exact(kind, out, torch.cat([gen(tag + (r,), m, dt, dev) for r in range(world)]))
    if kind.startswith("broadcast"):
        t = gen(tag, n, dt, dev) if rank == 0 else torch.zeros(n, dtype=dt, device=dev)
        dist.broadcast(t, src=0, group=g)
        return lambda: ctx.chk.exact(kind, t, gen(tag, n, dt, dev))
    if kind.startswith("all_to_all"):
        unit = max(1, n // (world * (world + 1)))
        split = [[unit * (1 + (r + 2 * p) % (world + 1)) for p in range(world)] for r in range(world)]
        ins = gen(tag + (rank,), sum(split[rank]), dt, dev)
        out = torch.empty(sum(split[p][rank] for p in range(world)), dtype=dt, device=dev)
        dist.all_to_all_single(out, ins, output_split_sizes=[split[p][rank] for p in range(world)],
                               input_split_sizes=split[rank], group=g)

        def check():
            parts = []
            for p in range(world):
                off = sum(split[p][:rank])
                parts.append(gen(tag + (p,), sum(split[p]), dt, dev)[off:off + split[p][rank]])
            ctx.chk.exact(kind, out, torch.cat(parts))
        return check
    if kind.startswith("send_recv"):
        if rank == 0:
            dist.isend(gen(tag, n, dt, dev), 1, group=g).wait()
            return lambda: None
        if rank == 1:
            buf = torch.empty(n, dtype=dt, device=dev)
            dist.irecv(buf, 0, group=g).wait()
            return lambda: ctx.chk.exact(kind, buf, gen(tag, n, dt, dev))
        return lambda: None
    raise ValueError(kind)


def run_late(ctx, kind, it):
    a = ctx.args
    g = dist.new_group(list(range(ctx.world)))
    dist.barrier(group=ctx.cpu_pg)
    if ctx.rank != 0:
        time.sleep(a.late_s)
    check = call(ctx, kind, g, it)
    side = []
    if ctx.rank == 0:
        cur = torch.cuda.current_stream(ctx.device)
        for _ in range(a.streams):
            s = torch.cuda.Stream(device=ctx.device)
            s.wait_stream(cur)
            with torch.cuda.stream(s):
                x = torch.ones(256, device=ctx.device)
                x.add_(1.0)
            done = torch.cuda.Event()
            done.record(s)
            side.append((done, x))
    end = torch.cuda.Event()
    end.record()
    deadline = time.monotonic() + a.limit_s
    pending = [e for e, _ in side] + [end]
    while pending and time.monotonic() < deadline:
        pending = [e for e in pending if not e.query()]
        time.sleep(0.005)
    if pending:
        tcommon.log(f"CASE late_{kind} FAIL {a.limit_s:.1f}s deadlock: {len(pending)} of {len(side) + 1} streams "
                    f"(the {a.streams} side streams waiting on the call, and the current stream) did not finish "
                    f"within {a.limit_s} s; exiting (the GPU cannot be drained)")
        sys.stdout.flush()
        os._exit(3)
    check()
    for _, x in side:
        ctx.chk.exact(f"{kind} side stream", x, torch.full_like(x, 2.0))


def main():
    p = tcommon.base_parser(__doc__, timeout_s=60)
    names = [f"late_{k}" for k in KINDS]
    p.add_argument("--cases", default=",".join(names), help="comma list, from: " + ",".join(names))
    p.add_argument("--late-s", type=float, default=1.0, help="how late every rank but 0 makes each call")
    p.add_argument("--streams", type=int, default=24, help="side streams made to wait on rank 0's current stream")
    p.add_argument("--limit-s", type=float, default=20.0, help="bound on the GPU work of a case once all called")
    args = p.parse_args()
    selected = tcommon.parse_cases(args.cases)
    bad = [c for c in selected if c not in names]
    if bad:
        p.error(f"unknown case(s) {bad}")
    ctx = tcommon.setup(args)
    if ctx.world < 2:
        raise SystemExit("needs 2 or more ranks")
    cases = [(f"late_{k}", lambda c, k=k, it=i: run_late(c, k, it)) for i, k in enumerate(KINDS)]
    failed = tcommon.run_cases(ctx, cases, selected)
    return tcommon.finish(ctx, failed)


if __name__ == "__main__":
    sys.exit(main())
