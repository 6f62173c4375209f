"""Point-to-point against collectives on *different* communicators, in orders NCCL allows (issue 24 item 6, case 2).

NCCL enqueues both kinds of call and returns, so a rank may isend on a 2-rank group and then all-reduce on the world
group while its peer all-reduces first and then irecvs. A library whose send or collective waits on the host for its
peer deadlocks on these. Every case uses fresh groups (new_group: a communicator of its own), so a case that times
out leaves the next case a working communicator.

Cases, for K in all_reduce, all_gather (all_gather_into_tensor), reduce_scatter (reduce_scatter_tensor), broadcast,
all_to_all (all_to_all_single with uneven splits), with the largest buffer of K 64 MiB and the p2p message 64 MiB:
  send_first_K  rank 0: isend to 1 on the pair group, then K on the world group; rank 1: K, then irecv from 0
  recv_first_K  rank 0: K, then isend; rank 1: irecv, then K (the receive posted before the collective)
  ring_grouped  every rank isends to the next rank and irecvs from the previous one in one batch_isend_irecv
  ring_ungrouped  the same as two standalone calls, isend first. Not a valid NCCL program, so not among the default
                cases: NCCL requires Send/Recv that must progress together to be grouped (its guide, "Point-to-point
                communication": "It is therefore important to merge calls that need to progress concurrently to avoid
                deadlocks"); each rank's Send of a message larger than the transport's buffers waits for a Recv that
                its peer has queued behind its own Send. conccl stalls the same way and reports it (the GPU watchdog,
                after CONCCL_TIMEOUT_MS) instead of hanging.
Ranks 2.. (4 processes) only make the collective. Results are checked against closed forms on seeded data. Run with
CONCCL_TIMEOUT_MS small (the runner uses 8000) so that a deadlock fails the case in seconds instead of minutes.
"""
import sys

import tcommon
from tcommon import gen

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

KINDS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
MIB = 1 << 20


def collective(ctx, kind, g, it):
    """Starts collective `kind` on group g (async); returns (work, check function)."""
    rank, world, dev, dt = ctx.rank, ctx.world, ctx.device, torch.float32
    n = ctx.args.mib * MIB // 4  # elements of the largest buffer
    tag = ("ord", kind, it)
    if kind == "all_reduce":
        t = gen(tag + (rank,), n, dt, dev)
        w = dist.all_reduce(t, group=g, async_op=True)

        def check():
            x64 = torch.stack([gen(tag + (r,), n, dt, dev).double() for r in range(world)])
            ctx.chk.sum_close(f"{kind}", t, x64.sum(0), x64.abs().sum(0), world, dt)
    elif kind == "all_gather":
        m = n // world
        out = torch.empty(m * world, dtype=dt, device=dev)
        w = dist.all_gather_into_tensor(out, gen(tag + (rank,), m, dt, dev), group=g, async_op=True)

        def check():
            ctx.chk.exact(kind, out, torch.cat([gen(tag + (r,), m, dt, dev) for r in range(world)]))
    elif kind == "reduce_scatter":
        m = n // world
        out = torch.empty(m, dtype=dt, device=dev)
        w = dist.reduce_scatter_tensor(out, gen(tag + (rank,), m * world, dt, dev), group=g, async_op=True)

        def check():
            x64 = torch.stack([gen(tag + (r,), m * world, dt, dev).double() for r in range(world)])
            x64 = x64[:, rank * m:(rank + 1) * m]
            ctx.chk.sum_close(kind, out, x64.sum(0), x64.abs().sum(0), world, dt)
    elif kind == "broadcast":
        root = world - 1
        t = gen(tag, n, dt, dev) if rank == root else torch.zeros(n, dtype=dt, device=dev)
        w = dist.broadcast(t, src=root, group=g, async_op=True)

        def check():
            ctx.chk.exact(kind, t, gen(tag, n, dt, dev))
    elif kind == "all_to_all":
        # split[r][p]: elements r -> p; rank r sends about n elements in all, uneven, one split 0 with 3+ ranks.
        unit = n // (world * (world + 1))
        split = [[0 if world > 2 and (r + p) % world == 1 else unit * (1 + (r + 2 * p) % (world + 1))
                  for p in range(world)] for r in range(world)]
        ins = gen(tag + (rank,), sum(split[rank]), dt, dev)
        out = torch.empty(sum(split[p][rank] for p in range(world)), dtype=dt, device=dev)
        w = dist.all_to_all_single(out, ins, output_split_sizes=[split[p][rank] for p in range(world)],
                                   input_split_sizes=split[rank], group=g, async_op=True)

        def check():
            parts = []
            for p in range(world):
                xp = gen(tag + (p,), sum(split[p]), dt, dev)
                off = sum(split[p][:rank])
                parts.append(xp[off:off + split[p][rank]])
            ctx.chk.exact(kind, out, torch.cat(parts))
    else:
        raise ValueError(kind)
    return w, check


def run_pair_case(ctx, kind, order, it):
    rank, dev = ctx.rank, ctx.device
    world_g = dist.new_group(list(range(ctx.world)))
    pair_g = dist.new_group([0, 1])
    n = ctx.args.mib * MIB // 4
    msg = ("p2p", kind, order, it)
    works, checks = [], []
    buf = None
    if rank == 0:
        if order == "send_first":
            works.append(dist.isend(gen(msg, n, torch.float32, dev), 1, group=pair_g))
            w, c = collective(ctx, kind, world_g, it)
        else:
            w, c = collective(ctx, kind, world_g, it)
            works.append(dist.isend(gen(msg, n, torch.float32, dev), 1, group=pair_g))
        works.append(w)
        checks.append(c)
    elif rank == 1:
        buf = torch.empty(n, dtype=torch.float32, device=dev)
        if order == "send_first":
            w, c = collective(ctx, kind, world_g, it)
            works.append(dist.irecv(buf, 0, group=pair_g))
        else:
            works.append(dist.irecv(buf, 0, group=pair_g))
            w, c = collective(ctx, kind, world_g, it)
        works.append(w)
        checks.append(c)
    else:
        w, c = collective(ctx, kind, world_g, it)
        works.append(w)
        checks.append(c)
    for w in works:
        w.wait()
    ctx.sync()
    for c in checks:
        c()
    if buf is not None:
        ctx.chk.exact(f"{order} {kind} p2p message", buf, gen(msg, n, torch.float32, dev))


def case_ring(ctx, grouped):
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    n = ctx.args.mib * MIB // 4
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    out = gen(("oring", rank), n, torch.float32, dev)
    got = torch.empty(n, dtype=torch.float32, device=dev)
    if grouped:
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, out, nxt), dist.P2POp(dist.irecv, got, prv)])
    else:
        works = [dist.isend(out, nxt), dist.irecv(got, prv)]
    for w in works:
        w.wait()
    ctx.sync()
    what = "grouped" if grouped else "standalone"
    ctx.chk.exact(f"{what} isend/irecv ring", got, gen(("oring", prv), n, torch.float32, dev))


def main():
    p = tcommon.base_parser(__doc__, timeout_s=60)
    names = [f"{o}_{k}" for k in KINDS for o in ("send_first", "recv_first")] + ["ring_grouped"]
    extra = ["ring_ungrouped"]  # not a valid NCCL program (see above): only when asked for
    p.add_argument("--cases", default=",".join(names), help="comma list, from: " + ",".join(names + extra))
    p.add_argument("--mib", type=int, default=64, help="MiB of the p2p message and of the collective's largest buffer")
    args = p.parse_args()
    selected = tcommon.parse_cases(args.cases)
    bad = [c for c in selected if c not in names + extra]
    if bad:
        p.error(f"unknown case(s) {bad}")
    ctx = tcommon.setup(args)
    if ctx.world < 2:
        raise SystemExit("needs 2 or more ranks")
    cases = []
    for i, name in enumerate(names + extra):
        if name.startswith("ring_"):
            cases.append((name, lambda c, g=(name == "ring_grouped"): case_ring(c, g)))
        else:
            order, kind = ("send_first", name[len("send_first_"):]) if name.startswith("send_first_") else \
                ("recv_first", name[len("recv_first_"):])
            cases.append((name, lambda c, k=kind, o=order, it=i: run_pair_case(c, k, o, it)))
    failed = tcommon.run_cases(ctx, cases, selected)
    return tcommon.finish(ctx, failed)


if __name__ == "__main__":
    sys.exit(main())
