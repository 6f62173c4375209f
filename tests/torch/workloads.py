"""The PyTorch workloads of issue 24 item 6, case 1 (and the MoE all-to-all of case 4), in one process group so that
one torchrun start serves them all. Each case is checked against a reference computed on fresh seeded data: closed
forms of inputs every rank regenerates from known seeds, or a model trained in-process without torch.distributed on
the same seed and the same global batch. Rank 0 prints one line per case as it goes:

    CASE <name> PASS|FAIL <seconds>s <detail>

then `RESULT OK|FAILED`; the exit status is non-zero if any case failed on any rank (verdicts are summed over a gloo
group, never through the library under test).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/workloads.py            # NCCL or shim
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/workloads.py --sim-hosts # plain NCCL,
                                                                                  # ranks sharing one GPU
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/workloads.py \\
        --backend gloo --device cpu --compile-backend aot_eager                     # the script's logic, no GPU

Cases (--cases to pick; all by default):
  collectives  shim_collectives.py's reductions, movement and new_group checks (fp32 1..12 MiB, bf16 to 10 MiB)
  p2p          paired blocking send/recv, batch_isend_irecv rings and an all-to-all by p2p with uneven sizes (12 MiB)
  groups       new_group subsets, list all_gather / reduce_scatter, gather / scatter, _coalescing_manager
  mesh2d       a 2-D DeviceMesh (2 x W/2, or 1 x W): all_reduce on each dimension's group, DTensor redistribution
  moe          MoE dispatch / combine: all_to_all_single with uneven, seeded routing (> 8 MiB per rank), fp32 + bf16
  ddp          DistributedDataParallel, 16 MiB of parameters (a > 8 MiB bucket), vs the single-process reference
  fsdp2        fully_shard fp32 (AVG reduce-scatter), vs the single-process reference
  fsdp2_bf16   fully_shard with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), vs an emulation of it
  tp           tensor parallel (ColwiseParallel + RowwiseParallel MLP, 12 MiB all-reduces) vs the reference
  hsdp         FSDP2 on a 2-D mesh (nodes x ranks per node: replicate across, shard inside), fp32, vs the reference
  tp_in_node   tensor parallel on each node's ranks (the "tp" dimension of a nodes x ranks-per-node mesh), vs the
               reference: every node trains the same model on the whole batch
               (hsdp and tp_in_node: "node" is --sim-nodes' G ranks, or 2 ranks without it; not in the default list)
  graphs       collectives captured in a CUDA graph, replayed on new data (shim_collectives.run_graph; GPU only)
  compile      torch.compile of functional collectives (all_reduce, all_gather, reduce_scatter) vs closed forms
  memory_return  256 MiB tensors used by collectives, freed, cache emptied: the GPU's free memory comes back once the
               ranks made eight calls on new memory (how much was held right after the release is reported)
  mem_pool     a MemPool on ProcessGroupNCCL.mem_allocator (ncclMemAlloc), register_mem_pool with symm False / True,
               collectives on its 12 MiB tensors, deregister_mem_pool; the drop-in's registration counts (GPU only)

Tolerances: sums within the any-order rounding bound (tcommon.Checker.sum_close); data movement bit-exact; training:
losses within 1e-4 (fp32) / 1e-2 (bf16) relative and the parameter updates (p_final - p_init) within 2e-3 (fp32) /
3e-2 (bf16) of the reference's, relative to the largest update. A rank's gradient missing or counted twice changes the
update by >= 1/W (>= 25 %), a stale bucket by 100 %: far above these.
"""
import copy
import gc
import os
import sys
import time
import types

import tcommon
from tcommon import gen, log

import torch  # noqa: E402 (tcommon sets the environment first)
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ALL_CASES = ["collectives", "p2p", "groups", "mesh2d", "moe", "ddp", "fsdp2", "fsdp2_bf16", "tp", "graphs", "compile",
             "memory_return", "mem_pool"]


def sc_module():
    import shim_collectives
    return shim_collectives


def sc_args(ctx):
    nccl = ctx.args.backend == "nccl"
    return types.SimpleNamespace(cpu_gloo=not nccl, premul=nccl, replays=2)


def drain_sc(ctx, sc):
    """shim_collectives keeps its own failure list and count: move them into this case's checker."""
    ctx.chk.failures.extend(sc.FAILURES)
    ctx.chk.checks += sc.CHECKS
    sc.FAILURES.clear()
    sc.CHECKS = 0


# ---------------------------------------------------------------------------------------------------------------
def case_collectives(ctx):
    sc = sc_module()
    a = sc_args(ctx)
    it = 1000
    for dtype, sizes in ((torch.float32, (1, 65537, 3 << 20)), (torch.bfloat16, (1000, 5 << 20))):
        for n in sizes:
            sc.run_reductions(a, ctx.world, ctx.rank, ctx.device, dtype, n, it)
            sc.run_movement(ctx.world, ctx.rank, ctx.device, dtype, n, it)
            it += 1
    sc.run_subgroups(ctx.world, ctx.rank, ctx.device)
    drain_sc(ctx, sc)


def case_graphs(ctx):
    if not ctx.cuda:
        ctx.notes["skipped"] = "no CUDA graphs on the CPU"
        return
    sc = sc_module()
    a = sc_args(ctx)
    sc.run_graph(a, ctx.world, ctx.rank, ctx.device, torch.float32, 1 << 16)
    sc.run_graph(a, ctx.world, ctx.rank, ctx.device, torch.bfloat16, 1 << 16)
    sc.run_graph(a, ctx.world, ctx.rank, ctx.device, torch.float32, 3 << 20)  # 12 MiB: above the staged threshold
    sc.run_graph_fresh(a, ctx.world, ctx.rank, ctx.device, torch.float32, 1 << 16)
    sc.run_graph_fresh(a, ctx.world, ctx.rank, ctx.device, torch.float32, 3 << 20)
    drain_sc(ctx, sc)


# ---------------------------------------------------------------------------------------------------------------
def case_p2p(ctx):
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    dt = torch.float32
    # Paired blocking send/recv (even <-> odd), the receiver posting first on one side, small and 12 MiB.
    for n in (1000, 3 << 20):
        peer = rank ^ 1
        if peer < world:
            mine = gen(("pair", rank, n), n, dt, dev)
            got = torch.empty(n, dtype=dt, device=dev)
            if rank % 2 == 0:
                dist.send(mine, peer)
                dist.recv(got, peer)
            else:
                dist.recv(got, peer)
                dist.send(mine, peer)
            ctx.chk.exact(f"send/recv pair n={n}", got, gen(("pair", peer, n), n, dt, dev))
    # batch_isend_irecv ring both directions, twice (the second reuses the communicators).
    for rep in range(2):
        n = (3 << 20) + rep * 17
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        mine = gen(("ring", rank, rep), n, dt, dev)
        from_prv = torch.empty(n, dtype=dt, device=dev)
        from_nxt = torch.empty(n, dtype=dt, device=dev)
        ops = [dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, from_prv, prv),
               dist.P2POp(dist.isend, mine, prv), dist.P2POp(dist.irecv, from_nxt, nxt)]
        for r in dist.batch_isend_irecv(ops):
            r.wait()
        ctx.chk.exact(f"batch ring from prev rep {rep}", from_prv, gen(("ring", prv, rep), n, dt, dev))
        ctx.chk.exact(f"batch ring from next rep {rep}", from_nxt, gen(("ring", nxt, rep), n, dt, dev))
    # An all-to-all made of p2p ops in one batch, uneven sizes (one of them 0), ~12 MiB per rank in all.
    size = [[0 if (r + 2 * p) % 5 == 4 else (1 << 20) + 4099 * ((r * 7 + p * 3) % 5) for p in range(world)]
            for r in range(world)]
    ops, outs = [], {}
    for p in range(world):
        if p == rank:
            continue
        if size[rank][p]:
            ops.append(dist.P2POp(dist.isend, gen(("pa2a", rank, p), size[rank][p], dt, dev), p))
        if size[p][rank]:
            outs[p] = torch.empty(size[p][rank], dtype=dt, device=dev)
            ops.append(dist.P2POp(dist.irecv, outs[p], p))
    if ops:
        for r in dist.batch_isend_irecv(ops):
            r.wait()
    for p, t in outs.items():
        ctx.chk.exact(f"p2p all-to-all from {p}", t, gen(("pa2a", p, rank), size[p][rank], dt, dev))


# ---------------------------------------------------------------------------------------------------------------
def case_groups(ctx):
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    dt = torch.float32
    n = 65537
    xs = [gen(("grp", r), n, dt, dev) for r in range(world)]
    # Subsets: evens, odds, and every adjacent pair (all ranks call every new_group, as torch requires).
    subsets = [[r for r in range(world) if r % 2 == 0], [r for r in range(world) if r % 2 == 1]]
    subsets += [[r, r + 1] for r in range(0, world - 1)]
    for members in subsets:
        if not members:
            continue
        g = dist.new_group(ranks=members)
        if rank in members:
            t = xs[rank].clone()
            dist.all_reduce(t, group=g)
            x64 = torch.stack([xs[r].double() for r in members])
            ctx.chk.sum_close(f"new_group({members}) all_reduce", t, x64.sum(0), x64.abs().sum(0), len(members), dt)
    # List all_gather with uneven sizes (torch groups broadcasts for it; gloo needs equal sizes).
    sizes = [1000 + (333 * r if ctx.args.backend == "nccl" else 0) for r in range(world)]
    outs = [torch.empty(s, dtype=dt, device=dev) for s in sizes]
    dist.all_gather(outs, gen(("agl", rank), sizes[rank], dt, dev))
    for r in range(world):
        ctx.chk.exact(f"all_gather list uneven from {r}", outs[r], gen(("agl", r), sizes[r], dt, dev))
    # List reduce_scatter (equal sizes).
    m = 4099
    ins = [[gen(("rsl", r, p), m, dt, dev) for p in range(world)] for r in range(world)]
    out = torch.empty(m, dtype=dt, device=dev)
    if ctx.args.backend == "nccl":  # gloo has no reduce_scatter
        dist.reduce_scatter(out, [t.clone() for t in ins[rank]])
        x64 = torch.stack([ins[r][rank].double() for r in range(world)])
        ctx.chk.sum_close("reduce_scatter list", out, x64.sum(0), x64.abs().sum(0), world, dt)
    # gather / scatter to / from the last rank.
    root = world - 1
    mine = gen(("gat", rank), m, dt, dev)
    glist = [torch.empty(m, dtype=dt, device=dev) for _ in range(world)] if rank == root else None
    dist.gather(mine, gather_list=glist, dst=root)
    if rank == root:
        for r in range(world):
            ctx.chk.exact(f"gather from {r}", glist[r], gen(("gat", r), m, dt, dev))
    slist = [gen(("sca", r), m, dt, dev) for r in range(world)] if rank == root else None
    got = torch.empty(m, dtype=dt, device=dev)
    dist.scatter(got, scatter_list=slist, src=root)
    ctx.chk.exact("scatter", got, gen(("sca", rank), m, dt, dev))
    # Coalesced all-reduces (one NCCL group for three tensors, one of them 12 MiB).
    cm_fn = getattr(dist.distributed_c10d, "_coalescing_manager", None)
    if cm_fn is not None and ctx.args.backend == "nccl":
        lens = (1000, 3 << 20, 77)
        ts = [gen(("coal", rank, i), k, dt, dev) for i, k in enumerate(lens)]
        with cm_fn(device=dev, async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t)
        cm.wait()
        for i, k in enumerate(lens):
            x64 = torch.stack([gen(("coal", r, i), k, dt, dev).double() for r in range(world)])
            ctx.chk.sum_close(f"coalesced all_reduce {i}", ts[i], x64.sum(0), x64.abs().sum(0), world, dt)
    else:
        ctx.notes["coalescing"] = "skipped"


# ---------------------------------------------------------------------------------------------------------------
def device_type(ctx):
    return "cuda" if ctx.cuda else "cpu"


def case_mesh2d(ctx):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    shape = (2, world // 2) if world >= 4 and world % 2 == 0 else (1, world)
    mesh = init_device_mesh(device_type(ctx), shape, mesh_dim_names=("dp", "tp"))
    ctx.notes["mesh"] = "x".join(map(str, shape))
    dt = torch.float32
    n = (1 << 20) + 5  # > 4 MiB per call
    for name in ("dp", "tp"):
        g = mesh.get_group(name)
        row = dist.get_process_group_ranks(g)
        t = gen(("mesh", name, rank), n, dt, dev)
        dist.all_reduce(t, group=g)
        x64 = torch.stack([gen(("mesh", name, r), n, dt, dev).double() for r in row])
        ctx.chk.sum_close(f"mesh {name} all_reduce over {row}", t, x64.sum(0), x64.abs().sum(0), len(row), dt)
    # DTensor: shard a full tensor on both dimensions, gather it back (all-gathers on both groups), and reshard.
    full = gen(("dtensor",), 1024 * 2048, dt, dev).view(1024, 2048)
    d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    ctx.chk.exact("DTensor [Shard(0), Shard(1)].full_tensor()", d.full_tensor(), full)
    r = d.redistribute(mesh, [Replicate(), Shard(0)])
    ctx.chk.exact("DTensor redistribute to [Replicate, Shard(0)]", r.full_tensor(), full)


# ---------------------------------------------------------------------------------------------------------------
def case_moe(ctx):
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    for dtype, hidden in ((torch.float32, 1024), (torch.bfloat16, 2048)):  # 4 KiB per token either way
        for it in range(3):
            # Routing of every rank, the same on every rank: tokens[r], dest[r][i] (expert p lives on rank p).
            tokens = [3072 + 97 * ((r + it) % 4) for r in range(world)]  # ~12 MiB out per rank
            dests = []
            for r in range(world):
                g = torch.Generator().manual_seed(9000 + 31 * it + r)
                w = torch.rand(world, generator=g) + 0.05
                if world > 2:
                    w[(r + it) % world] = 0.0  # one peer gets nothing from r: a zero split
                dests.append(torch.multinomial(w, tokens[r], replacement=True, generator=g))
            counts = [[int((dests[r] == p).sum()) for p in range(world)] for r in range(world)]
            x = gen(("moe", str(dtype), it, rank), tokens[rank] * hidden, dtype, dev).view(tokens[rank], hidden)
            order = torch.argsort(dests[rank], stable=True).to(dev)
            send = x[order].contiguous()
            # 1. the counts, as MoE layers exchange them (all_to_all_single of one int64 per peer).
            c_out = torch.empty(world, dtype=torch.int64, device=dev)
            dist.all_to_all_single(c_out, torch.tensor(counts[rank], dtype=torch.int64, device=dev))
            ctx.chk.exact(f"moe {dtype} it {it} counts", c_out.cpu(),
                          torch.tensor([counts[p][rank] for p in range(world)], dtype=torch.int64))
            # 2. dispatch: uneven all_to_all_single of token rows.
            in_splits = counts[rank]
            out_splits = [counts[p][rank] for p in range(world)]
            recv = torch.empty(sum(out_splits), hidden, dtype=dtype, device=dev)
            dist.all_to_all_single(recv, send, output_split_sizes=out_splits, input_split_sizes=in_splits)
            want = []
            for p in range(world):
                xp = gen(("moe", str(dtype), it, p), tokens[p] * hidden, dtype, dev).view(tokens[p], hidden)
                want.append(xp[torch.argsort(dests[p], stable=True).to(dev)][sum(counts[p][:rank]):
                                                                                sum(counts[p][:rank + 1])])
            ctx.chk.exact(f"moe {dtype} it {it} dispatch", recv, torch.cat(want))
            # 3. the expert (exact in both dtypes: times a small power of two, plus a constant of its own)
            y = recv * (2.0 ** (rank % 3)) + float(rank)
            # 4. combine: the reverse all-to-all brings every token back to its sender, in dispatch order.
            back = torch.empty_like(send)
            dist.all_to_all_single(back, y.contiguous(), output_split_sizes=in_splits, input_split_sizes=out_splits)
            d_sorted = dests[rank][order.cpu()].to(dev)
            scale = (2.0 ** (d_sorted % 3).to(torch.float32)).to(dtype).unsqueeze(1)
            ctx.chk.exact(f"moe {dtype} it {it} combine", back, send * scale + d_sorted.to(dtype).unsqueeze(1))
        ctx.notes[f"moe_{str(dtype).split('.')[-1]}_MiB_per_rank"] = round(tokens[rank] * hidden *
                                                                           send.element_size() / 2**20, 1)


def case_memory_return(ctx):
    """Memory the allocator releases goes back to CUDA. Every rank runs all_reduce (in place) and
    all_gather_into_tensor on 256 MiB tensors (3 rounds), frees them and empties the cache. A library that maps its
    peers' buffers (conccl maps the whole allocation of each) keeps that memory allocated while the mapping lives; conccl
    drops a peer's mappings of memory the peer freed once the peer has found it freed (when it exports new memory, and
    in the background every 100 ms), its next call has carried the retired ids and the ranks reach their next calls
    (docs/multiprocess.md, "Buffers"): the calls below start 0.3 s after the release. Asserted: after eight such calls the GPU's free memory is back to where it was before (within
    64 MiB for the whole GPU), measured the same way: the baseline is taken after what earlier cases left mapped was
    retired the same way (a drain), then after the same eight calls, whose own buffer stays mapped alike. Reported, not
    asserted: how much was still held right after the release, before any further call (plain NCCL maps nothing: ~0).
    Through the drop-in with expandable segments and no VMM export every call is staged and nothing is mapped. On the
    CPU (gloo) only the collectives' results are checked, on 4 MiB tensors."""
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    mib = 1 << 20
    big = (256 if ctx.cuda else 4) * mib // 4  # floats per tensor

    def new_export_calls(tag):
        # Calls above the staged size (16 MiB) after the background sweep's period (the memory freed before may be
        # reused for this tensor: then no new export sweeps it): the first carries the retirements of freed memory,
        # and the peers drop their mappings at their following calls.
        time.sleep(0.3)
        t = torch.full((16 * mib // 4,), float(rank + 1), device=dev)
        for i in range(8):
            t.fill_(float(rank + 1))
            dist.all_reduce(t)
            ctx.chk.exact(f"memory_return {tag} call {i}", t[:8],
                          torch.full((8,), float(world * (world + 1) // 2), device=dev))
        del t

    def settled_free():
        # Every rank's work done, PyTorch's references to the calls' tensors dropped (its watchdog releases them within
        # ~0.1 s), cycles collected, background closes of retired mappings run, every cache emptied: then the device's
        # free memory (one number for the whole GPU, which ranks may share), read by every rank before any allocates.
        ctx.sync()
        dist.barrier(group=ctx.cpu_pg)
        time.sleep(0.5)
        gc.collect()
        if ctx.cuda:
            torch.cuda.empty_cache()
            ctx.sync()
        dist.barrier(group=ctx.cpu_pg)
        free = torch.cuda.mem_get_info(dev)[0] if ctx.cuda else 0
        dist.barrier(group=ctx.cpu_pg)
        return free

    def rounds(n, count, tag):
        for it in range(n):
            x = gen((tag, it, rank), count, torch.float32, dev)
            dist.all_reduce(x)
            parts = [gen((tag, it, p), count, torch.float32, dev).double() for p in range(world)]
            ctx.chk.sum_close(f"memory_return {tag} all_reduce {it}", x, sum(parts), sum(q.abs() for q in parts),
                              world, torch.float32)
            del parts
            shard = gen((tag + "-ag", it, rank), count // world, torch.float32, dev)
            out = torch.empty(count // world * world, device=dev)
            dist.all_gather_into_tensor(out, shard)
            ctx.chk.exact(f"memory_return {tag} all_gather {it}", out,
                          torch.cat([gen((tag + "-ag", it, p), count // world, torch.float32, dev)
                                     for p in range(world)]))
            del x, shard, out

    # Drain: one small round (its kernels loaded, as the measured rounds need them), then what earlier cases left
    # mapped retired like the measured rounds' memory will be, so that the baseline holds none of it.
    rounds(1, big // 16, "memret-drain")
    settled_free()
    new_export_calls("drain")
    settled_free()
    new_export_calls("warm-up")
    free0 = settled_free()
    rounds(3, big, "memret")
    free1 = settled_free()
    new_export_calls("after")
    free2 = settled_free()
    if not ctx.cuda:
        return
    held_now, held_after = (free0 - free1) / mib, (free0 - free2) / mib
    ctx.notes["held_MiB_right_after_release"] = round(held_now, 1)
    ctx.notes["held_MiB_after_eight_calls"] = round(held_after, 1)
    ctx.chk.true("memory_return", held_after <= 64,
                 f"{held_after:.0f} MiB is still allocated after eight calls on new memory ({held_now:.0f} MiB right "
                 f"after the release; each of the {world} ranks freed about {2 * 256 + 256 // world} MiB)")


def pool_allocator(backend, ctx):
    """ProcessGroupNCCL's ncclMemAlloc allocator where PyTorch offers it (it asks for a device with multicast, for
    NVLS), else None: the pool then takes cudaMalloc memory, which register_mem_pool registers all the same."""
    try:
        return backend.mem_allocator
    except RuntimeError as e:
        if "not supported" not in str(e):
            raise
        ctx.notes["pool_allocator"] = "cudaMalloc (PyTorch: " + str(e).splitlines()[0][:80] + ")"
        return None


def case_mem_pool(ctx):
    """Buffers from the communicator's own allocator, registered with it, as NCCL user-buffer setups (Megatron's
    NCCL-UB) make them: a torch.cuda.MemPool on ProcessGroupNCCL's mem_allocator (ncclMemAlloc / ncclMemFree; where
    PyTorch refuses it, on a device without multicast, cudaMalloc memory),
    register_mem_pool (ncclCommRegister of each segment; symm=True: ncclCommWindowRegister, collective), one tensor
    allocated after the registration (the allocator hook registers its segment), deregister_mem_pool, the pool freed.
    With expandable segments and CONCCL_VMM_EXPORT=0 the drop-in must refuse symm=True (the peers cannot map the
    memory) on every rank and stay in service; the calls on the pool's tensors are then staged.
    all_gather_into_tensor, reduce_scatter_tensor, all_reduce and all_to_all_single on 12 MiB pool tensors (above the
    staged size), checked against closed forms. Through the drop-in its registration counts must rise and the
    registrations end with deregister_mem_pool."""
    if not ctx.cuda or ctx.args.backend != "nccl":
        ctx.notes["skipped"] = "needs ProcessGroupNCCL on a GPU"
        return
    if torch.cuda.get_allocator_backend() == "cudaMallocAsync":
        # PyTorch itself refuses a MemPool there ("cudaMallocAsync does not yet support createOrIncrefPool", seen on one
        # H100 with PyTorch's wheel, 2026-12-06): nothing of the library to check.
        ctx.notes["skipped"] = "PyTorch's cudaMallocAsync backend has no MemPool"
        return
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    backend = dist.group.WORLD._get_backend(dev)
    n = 3 << 20  # floats per rank: 12 MiB
    f32 = torch.float32
    allocator = pool_allocator(backend, ctx)
    if allocator is None and tcommon.shim_loaded() is None:
        # Seen on one H100 with plain NCCL 2.28.9 as simulated hosts (2026-12-05): ncclCommRegister of a cudaMalloc
        # segment fails ("unhandled cuda error"), and PyTorch offers its ncclMemAlloc pool only with multicast.
        ctx.notes["skipped"] = "plain NCCL registers no cudaMalloc segment, and no ncclMemAlloc pool is offered here"
        return
    for symm in (False, True):
        tag = f"mem_pool symm={symm}"
        before = tcommon.registration_counts()
        pool = torch.cuda.MemPool(allocator)
        with torch.cuda.use_mem_pool(pool):
            x = gen(("mempool", symm, rank), n, f32, dev)
            gathered = torch.empty(n * world, dtype=f32, device=dev)
        # Expandable segments that the drop-in was told not to share (CONCCL_VMM_EXPORT=0) cannot be a window: the
        # registration must be refused on every rank, with the communicator still in service, and the calls on the
        # (unregistered) pool tensors below are staged and right all the same.
        window_refused = (symm and tcommon.shim_loaded() is not None and ctx.expandable
                          and os.environ.get("CONCCL_VMM_EXPORT") == "0")
        if window_refused:
            try:
                backend.register_mem_pool(pool, symm=True)
                ctx.chk.fail(f"{tag}: register_mem_pool(symm=True) was accepted on expandable segments with "
                             "CONCCL_VMM_EXPORT=0, which the peers cannot map")
            except (RuntimeError, dist.DistBackendError) as e:
                ctx.notes["window_refused"] = str(e).splitlines()[0][:120]
        elif symm:
            backend.register_mem_pool(pool, symm=True)  # PyTorch >= 2.9
        else:
            backend.register_mem_pool(pool)
        with torch.cuda.use_mem_pool(pool):
            late = torch.empty(n, dtype=f32, device=dev)  # a segment made after the registration
            a2a = torch.empty(n, dtype=f32, device=dev)
        mid = tcommon.registration_counts()
        xs = [gen(("mempool", symm, p), n, f32, dev) for p in range(world)]
        dist.all_gather_into_tensor(gathered, x)
        ctx.chk.exact(f"{tag} all_gather_into_tensor", gathered, torch.cat(xs))
        # Every rank reduces the same gathered tensor: rank r gets world copies of x_r summed.
        dist.reduce_scatter_tensor(late, gathered)
        ctx.chk.sum_close(f"{tag} reduce_scatter_tensor", late, world * xs[rank].double(),
                          world * xs[rank].double().abs(), world, f32)
        dist.all_to_all_single(a2a, x)
        chunk = n // world
        ctx.chk.exact(f"{tag} all_to_all_single", a2a,
                      torch.cat([xs[p][rank * chunk:(rank + 1) * chunk] for p in range(world)]))
        dist.all_reduce(x)
        ctx.chk.sum_close(f"{tag} all_reduce", x, sum(t.double() for t in xs), sum(t.double().abs() for t in xs),
                          world, f32)
        ctx.sync()
        if not window_refused:
            backend.deregister_mem_pool(pool)
        del x, gathered, late, a2a, xs
        del pool  # its segments go back through ncclMemFree once no tensor holds them
        gc.collect()
        torch.cuda.empty_cache()
        after = tcommon.registration_counts()
        if before is None:
            continue  # plain NCCL: it counts nothing for us
        key = "windows_registered" if symm else "registered"
        made = mid[key] - before[key]
        ctx.notes[f"symm={symm}"] = {k: after[k] - before[k] for k in after}
        if window_refused:
            ctx.chk.true(f"{tag} refused", after[key] == before[key],
                         f"the drop-in counted {after[key] - before[key]} window(s) accepted on memory it must refuse")
            continue
        ctx.chk.true(f"{tag} registered", made >= 1,
                     f"register_mem_pool(symm={symm}) made {made} {key.replace('_', ' ')} call(s) in the drop-in")
        gone = after[key.replace("registered", "deregistered")] - before[key.replace("registered", "deregistered")]
        ctx.chk.true(f"{tag} deregistered", gone >= made,
                     f"deregister_mem_pool ended {gone} of the {made} registration(s) made by register_mem_pool")


# ---------------------------------------------------------------------------------------------------------------
# Training cases: the same model and data on every rank; the reference trains a local copy on the global batch.


class MLP(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:])])

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.tanh(x)
        return x


def make_model(dims, seed):
    torch.manual_seed(seed)
    return MLP(dims)


def batch_for(step, n, din, dout, seed, dev):
    g = torch.Generator().manual_seed(seed * 7919 + step)
    x = torch.randn(n, din, generator=g)
    y = torch.randn(n, dout, generator=g)
    return x.to(dev), y.to(dev)


def sgd(params, lr=0.05):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def reference_training(dims, seed, steps, global_batch, dev):
    model = make_model(dims, seed).to(dev)
    p0 = [p.detach().clone() for p in model.parameters()]
    opt = sgd(model.parameters())
    losses = []
    for s in range(steps):
        x, y = batch_for(s, global_batch, dims[0], dims[-1], seed, dev)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, p0, [p.detach().clone() for p in model.parameters()]


def global_loss(ctx, local_loss):
    t = torch.tensor([float(local_loss)], dtype=torch.float64)
    dist.all_reduce(t, group=ctx.cpu_pg)  # the mean over ranks of equal-sized shards = the global batch's mean
    return t.item() / ctx.world


def compare_training(ctx, name, losses, ref_losses, p0, params, ref_params, loss_rtol, upd_rtol):
    ctx.chk.close(f"{name} losses", losses, ref_losses, rtol=loss_rtol)
    worst = 0.0
    for i, (a, b, q0) in enumerate(zip(params, ref_params, p0)):
        du, dr = (a.double().cpu() - q0.double().cpu()), (b.double().cpu() - q0.double().cpu())
        scale = float(dr.abs().max()) or 1.0
        rel = float((du - dr).abs().max()) / scale
        worst = max(worst, rel)
        ctx.chk.true(f"{name} param {i} update", rel <= upd_rtol,
                     f"update differs from the reference's by {rel:.3e} of its largest entry (> {upd_rtol:g})")
    ctx.notes[f"{name}_loss"] = f"{losses[0]:.5f}->{losses[-1]:.5f}"
    ctx.notes[f"{name}_max_update_rel"] = f"{worst:.2e}"


def case_ddp(ctx):
    from torch.nn.parallel import DistributedDataParallel as DDP
    dims, seed, steps, b = [1024, 2048, 1024, 256], 11, 5, 16  # 4.5 M parameters, 18 MiB of gradients
    ref_losses, p0, ref_p = reference_training(dims, seed, steps, b * ctx.world, ctx.device)
    model = make_model(dims, seed).to(ctx.device)
    ddp = DDP(model, device_ids=[ctx.device.index] if ctx.cuda else None)
    opt = sgd(ddp.parameters())
    losses = []
    for s in range(steps):
        x, y = batch_for(s, b * ctx.world, dims[0], dims[-1], seed, ctx.device)
        x, y = x[ctx.rank * b:(ctx.rank + 1) * b], y[ctx.rank * b:(ctx.rank + 1) * b]
        loss = F.mse_loss(ddp(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(global_loss(ctx, loss.item()))
    compare_training(ctx, "ddp", losses, ref_losses, p0, [p.detach() for p in model.parameters()], ref_p,
                     1e-4, 2e-3)


def full_params(model):
    out = []
    for p in model.parameters():
        p = p.detach()
        out.append(p.full_tensor() if hasattr(p, "full_tensor") else p)
    return out


def node_mesh(ctx, names):
    """A 2-D mesh (nodes, ranks per node) with the given dimension names: --sim-nodes' layout, or pairs."""
    from torch.distributed.device_mesh import init_device_mesh
    per = ctx.args.sim_nodes or (2 if ctx.world % 2 == 0 and ctx.world > 2 else ctx.world)
    ctx.notes["mesh"] = f"{ctx.world // per}x{per}"
    return init_device_mesh(device_type(ctx), (ctx.world // per, per), mesh_dim_names=names)


def case_fsdp2(ctx, bf16=False, hsdp=False):
    """FSDP2 on the world, or with hsdp on a (nodes, ranks per node) mesh: HSDP, gradients reduce-scattered inside a
    node and all-reduced across (node_mesh)."""
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard
    # 2048x2048 fp32 = 16 MiB: > 8 MiB all-gathers
    dims, seed, steps, b = [1024, 2048, 2048, 1024], 29 if hsdp else 23, 5, 16
    dev = ctx.device
    if hsdp:
        mesh = node_mesh(ctx, ("replicate", "shard"))
    else:
        mesh = init_device_mesh(device_type(ctx), (ctx.world,))
    name = "hsdp" if hsdp else "fsdp2_bf16" if bf16 else "fsdp2"
    if not bf16:
        ref_losses, p0, ref_p = reference_training(dims, seed, steps, b * ctx.world, dev)
    else:
        ref_losses, p0, ref_p = reference_bf16(ctx, dims, seed, steps, b)
    model = make_model(dims, seed).to(dev)
    kw = {"mesh": mesh}
    if bf16:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    opt = sgd(model.parameters())
    losses = []
    for s in range(steps):
        x, y = batch_for(s, b * ctx.world, dims[0], dims[-1], seed, dev)
        x, y = x[ctx.rank * b:(ctx.rank + 1) * b], y[ctx.rank * b:(ctx.rank + 1) * b]
        out = model(x.to(torch.bfloat16) if bf16 else x)
        loss = F.mse_loss(out.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(global_loss(ctx, loss.item()))
    compare_training(ctx, name, losses, ref_losses, p0, full_params(model), ref_p,
                     1e-2 if bf16 else 1e-4, 3e-2 if bf16 else 2e-3)


def reference_bf16(ctx, dims, seed, steps, b):
    """FSDP2 with param_dtype=bf16, reduce_dtype=fp32, emulated in one process: each rank's shard of the batch
    through a bf16 copy of the fp32 parameters, its bf16 gradients widened to fp32 and averaged over ranks, SGD on
    the fp32 parameters. Only the order of the fp32 reduction differs from the real thing."""
    dev = ctx.device
    master = make_model(dims, seed).to(dev)
    p0 = [p.detach().clone() for p in master.parameters()]
    opt = sgd(master.parameters())
    losses = []
    for s in range(steps):
        x, y = batch_for(s, b * ctx.world, dims[0], dims[-1], seed, dev)
        grads = [torch.zeros_like(p) for p in master.parameters()]
        total = 0.0
        for r in range(ctx.world):
            low = copy.deepcopy(master).to(torch.bfloat16)
            out = low(x[r * b:(r + 1) * b].to(torch.bfloat16))
            loss = F.mse_loss(out.float(), y[r * b:(r + 1) * b])
            loss.backward()
            total += loss.item()
            for gacc, p in zip(grads, low.parameters()):
                gacc += p.grad.float()
        opt.zero_grad(set_to_none=True)
        for p, gacc in zip(master.parameters(), grads):
            p.grad = gacc / ctx.world
        opt.step()
        losses.append(total / ctx.world)
    return losses, p0, [p.detach().clone() for p in master.parameters()]


def case_tp(ctx, in_node=False):
    """Tensor parallelism on the world, or with in_node on each node's ranks (the "tp" dimension of node_mesh): every
    node then trains the same model on the whole batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    # 3072 x 1024 fp32 = 12 MiB all-reduces
    dims, seed, steps, n = [1024, 4096, 1024], 41 if in_node else 37, 4, 3072
    dev = ctx.device
    ref_losses, p0, ref_p = reference_training(dims, seed, steps, n, dev)
    if in_node:
        mesh = node_mesh(ctx, ("dp", "tp"))["tp"]
    else:
        mesh = init_device_mesh(device_type(ctx), (ctx.world,))
    model = make_model(dims, seed).to(dev)
    parallelize_module(model, mesh, {"layers.0": ColwiseParallel(), "layers.1": RowwiseParallel()})
    opt = sgd(model.parameters())
    losses = []
    for s in range(steps):
        x, y = batch_for(s, n, dims[0], dims[-1], seed, dev)  # every rank the whole batch (replicated input)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    compare_training(ctx, "tp_in_node" if in_node else "tp", losses, ref_losses, p0, full_params(model), ref_p,
                     1e-4, 2e-3)


# ---------------------------------------------------------------------------------------------------------------
def case_compile(ctx):
    import torch.distributed._functional_collectives as funcol
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    group = dist.group.WORLD
    dt = torch.float32
    n = 3 << 20  # 12 MiB
    m = n // world

    def step(x, y):
        a = funcol.all_reduce(x * 2.0, "sum", group)
        b = funcol.all_gather_tensor(y + 1.0, 0, group)
        c = funcol.reduce_scatter_tensor(x, "sum", 0, group)
        return a * 0.5, b * 3.0, c

    fn = torch.compile(step, backend=ctx.args.compile_backend, fullgraph=True)
    for it in range(2):  # the second call runs the compiled graph on new data
        xs = [gen(("cmp", it, "x", r), n, dt, dev) for r in range(world)]
        ys = [gen(("cmp", it, "y", r), m, dt, dev) for r in range(world)]
        a, b, c = fn(xs[rank], ys[rank])
        x64 = torch.stack([x.double() for x in xs])
        # a: sum_r (2 x_r) / 2: the doubling and halving are exact, so the bound of a plain sum holds.
        ctx.chk.sum_close(f"compile all_reduce it {it}", a, x64.sum(0), x64.abs().sum(0), world, dt)
        # b: (y_r + 1) * 3 for every r: the same two roundings eagerly (inductor may fuse them: 1 ulp of slack).
        want_b = torch.cat([(y + 1.0) * 3.0 for y in ys])
        ctx.chk.close(f"compile all_gather it {it}", b, want_b, rtol=2.0**-22, atol=2.0**-22)
        s64 = x64[:, rank * m:(rank + 1) * m]
        ctx.chk.sum_close(f"compile reduce_scatter it {it}", c, s64.sum(0), s64.abs().sum(0), world, dt)
    ctx.notes["compile_backend"] = ctx.args.compile_backend


CASES = {
    "collectives": case_collectives, "p2p": case_p2p, "groups": case_groups, "mesh2d": case_mesh2d,
    "moe": case_moe, "ddp": case_ddp, "fsdp2": case_fsdp2, "fsdp2_bf16": lambda c: case_fsdp2(c, bf16=True),
    "tp": case_tp, "graphs": case_graphs, "compile": case_compile, "hsdp": lambda c: case_fsdp2(c, hsdp=True),
    "tp_in_node": lambda c: case_tp(c, in_node=True), "memory_return": case_memory_return, "mem_pool": case_mem_pool,
}


def main():
    p = tcommon.base_parser(__doc__)
    p.add_argument("--cases", default=",".join(ALL_CASES), help="comma list, from: " + ",".join(CASES))
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (aot_eager: no codegen)")
    args = p.parse_args()
    unknown = [c for c in tcommon.parse_cases(args.cases) if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {unknown}")
    # Deterministic kernels: the reference and the distributed run differ only by the collectives.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ctx = tcommon.setup(args)
    selected = tcommon.parse_cases(args.cases)
    failed = tcommon.run_cases(ctx, [(c, CASES[c]) for c in selected])
    return tcommon.finish(ctx, failed)


if __name__ == "__main__":
    sys.exit(main())
