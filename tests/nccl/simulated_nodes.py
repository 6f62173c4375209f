"""Simulated nodes on one machine, through the NCCL shim (libconccl_nccl.so preloaded): locality per communicator.

Rank r sits on simulated node r // --per-node as far as the shim is concerned (CONCCL_HOSTID). For the real NCCL,
NCCL_HOSTID is either the same node (--nccl-hostid node: realistic, needs a GPU per rank of a node) or a host per
process (--nccl-hostid proc: what one GPU needs, since NCCL refuses two ranks of one host on one GPU); CONCCL_HOSTID
wins over NCCL_HOSTID in the shim, so the shim's view stays the simulated nodes either way.

Communicators made (every rank checks its results against values computed here):
  world    every rank            -> hierarchical with 2+ nodes of 2+ ranks (conccl inside each node, NCCL rails
                                    between them), NCCL with one rank per node, conccl with one node
  node k   the ranks of node k   -> conccl (all on one host)
  rail j   local index j, across -> NCCL when there are 2+ nodes
  pairs    local index 0 and 1 of every node (with 2+ ranks per node) -> hierarchical with 2+ nodes (--mode split:
           the shim's hierarchical split child; new_group: a rendezvous of its own)
On the world communicator every collective is checked against a reference on fresh random data (--seed, integer
values so that sums are exact in any order): all_reduce (sum, max, avg), all_gather, reduce_scatter, broadcast and
reduce from several roots, all_to_all (even splits; uneven ones, which torch runs as grouped send/recv), gather,
scatter, send/recv across and inside nodes, each at a count the ranks per node divide and at an odd one (the
hierarchical path sends the latter to the flat NCCL communicator).
--mode split: init_process_group(device_id=...) binds the device, so new_group is ncclCommSplit of the world
(the shim's split of an NCCL parent); --mode new_group: no bound device, so each group gets its own
ncclGetUniqueId + ncclCommInitRankConfig (a fresh rendezvous per group).
The shim prints one line per communicator on stderr; run_simulated_nodes.sh counts them.
Prints "simulated-nodes rank R: ok" on success, exits non-zero otherwise.
"""
import argparse
import os
import sys


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--per-node", type=int, required=True)
    p.add_argument("--mode", choices=["split", "new_group"], required=True)
    p.add_argument("--nccl-hostid", choices=["node", "proc"], default="proc")
    p.add_argument("--seed", type=int, default=1, help="the run's random seed (the same on every rank)")
    args = p.parse_args()
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    per = args.per_node
    if world % per:
        print(f"WORLD_SIZE {world} is not a multiple of --per-node {per}", file=sys.stderr)
        return 2
    nodes = world // per
    node, local = divmod(rank, per)
    # Before torch.distributed: the shim reads these when the first communicator is made.
    os.environ["CONCCL_HOSTID"] = f"simnode{node}"
    os.environ["NCCL_HOSTID"] = f"simnode{node}" if args.nccl_hostid == "node" else f"simproc{rank}"

    import torch
    import torch.distributed as dist

    ngpu = torch.cuda.device_count()
    if ngpu == 0:
        print("no CUDA device", file=sys.stderr)
        return 2
    dev = local % ngpu
    torch.cuda.set_device(dev)
    device = torch.device("cuda", dev)
    if args.mode == "split":
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("nccl")

    failures = []

    def check(name, got, want):
        if not torch.equal(got, want):
            failures.append(f"{name}: got {got[:4].tolist()} want {want[:4].tolist()}")

    n = 1 << 16
    # World: every rank contributes rank + 1.
    x = torch.full((n,), float(rank + 1), device=device)
    dist.all_reduce(x)
    check("world all_reduce", x, torch.full((n,), world * (world + 1) / 2, device=device))

    # Every rank creates every group, in the same order (torch's rule for new_group).
    node_groups = [dist.new_group(list(range(k * per, (k + 1) * per))) for k in range(nodes)]
    rail_groups = [dist.new_group([k * per + j for k in range(nodes)]) for j in range(per)]
    mine = node_groups[node]
    rail = rail_groups[local]
    pair_members = [k * per + j for k in range(nodes) for j in range(min(per, 2))]
    pairs = dist.new_group(pair_members) if per >= 2 else None

    x = torch.full((n,), float(rank + 1), device=device)
    dist.all_reduce(x, group=mine)
    members = range(node * per, (node + 1) * per)
    check("node all_reduce", x, torch.full((n,), float(sum(r + 1 for r in members)), device=device))
    out = torch.empty(per * 1024, device=device)
    dist.all_gather_into_tensor(out, torch.full((1024,), float(rank), device=device), group=mine)
    want = torch.cat([torch.full((1024,), float(r), device=device) for r in members])
    check("node all_gather", out, want)

    x = torch.full((n,), float(rank + 1), device=device)
    dist.all_reduce(x, group=rail)
    check("rail all_reduce", x, torch.full((n,), float(sum(k * per + local + 1 for k in range(nodes))), device=device))

    if pairs is not None and rank in pair_members:
        x = torch.full((n,), float(rank + 1), device=device)
        dist.all_reduce(x, group=pairs)
        check("pairs all_reduce", x, torch.full((n,), float(sum(r + 1 for r in pair_members)), device=device))
        out = torch.empty(len(pair_members) * 1024, device=device)
        dist.all_gather_into_tensor(out, torch.full((1024,), float(rank), device=device), group=pairs)
        check("pairs all_gather", out,
              torch.cat([torch.full((1024,), float(r), device=device) for r in pair_members]))

    # The hierarchical all-reduce by hand: reduce-scatter in the node, all-reduce on the rail, all-gather in the node.
    m = per * 4096
    x = torch.arange(m, device=device, dtype=torch.float32) + rank
    shard = torch.empty(m // per, device=device)
    dist.reduce_scatter_tensor(shard, x, group=mine)
    dist.all_reduce(shard, group=rail)
    full = torch.empty(m, device=device)
    dist.all_gather_into_tensor(full, shard, group=mine)
    check("hierarchical all_reduce", full, world * torch.arange(m, device=device, dtype=torch.float32) + world * (world - 1) / 2)

    failures += check_world(rank, world, per, device, args.seed)

    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        for f in failures:
            print(f"simulated-nodes rank {rank}: FAIL {f}", flush=True)
        return 1
    print(f"simulated-nodes rank {rank}: ok", flush=True)
    return 0


def check_world(rank, world, per, device, seed):
    """Every collective on the world communicator against a reference every rank computes itself: the inputs of all
    ranks are drawn from generators seeded by (seed, call, rank), so each rank knows what every other rank sent."""
    import torch
    import torch.distributed as dist

    failures = []
    call = [0]

    def inputs(shape, dtype=torch.float32):
        """Fresh integer-valued data of every rank for the next call: [world, *shape]."""
        call[0] += 1
        out = []
        for r in range(world):
            g = torch.Generator().manual_seed(seed * 1000003 + call[0] * 1009 + r)
            out.append(torch.randint(-64, 64, shape, generator=g).to(dtype))
        return torch.stack(out)

    def check(name, got, want, atol=0.0):
        """Exact unless atol > 0 (the average: see below)."""
        want = want.to(got.device)
        if got.shape != want.shape:
            failures.append(f"world {name}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
            return
        bad = ((got - want).abs() > atol).flatten().nonzero().flatten()
        if bad.numel():
            i = bad[0].item()
            failures.append(f"world {name}: {bad.numel()} of {got.numel()} elements off by more than {atol}, first at "
                            f"[{i}]: got {got.flatten()[i].item()!r}, want {want.flatten()[i].item()!r}")

    for count in (per * 8192, 1001):
        tag = f"count {count}"
        x = inputs((count,))
        t = x[rank].to(device)
        dist.all_reduce(t)
        check(f"all_reduce sum {tag}", t, x.sum(0))
        t = x[rank].to(device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        check(f"all_reduce max {tag}", t, x.max(0).values)
        # Multiples of world: the exact average is an integer. NCCL computes a float average as a sum of x * (1/world)
        # (PreMulSum), so each term is rounded once where 1/world is not a power of two: the result may differ from
        # the exact one by a few units in the last place of the terms (|x / world| <= 64: ulp 7.6e-6), also where
        # the exact average is 0. Tolerance: world terms of half an ulp each, with margin.
        x = inputs((count,)) * world
        t = x[rank].to(device)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        check(f"all_reduce avg {tag}", t, x.sum(0) / world, atol=world * 8e-6)

        x = inputs((count,))
        out = torch.empty(world * count, device=device)
        dist.all_gather_into_tensor(out, x[rank].to(device))
        check(f"all_gather {tag}", out, x.flatten())

        x = inputs((world * count,))
        out = torch.empty(count, device=device)
        dist.reduce_scatter_tensor(out, x[rank].to(device))
        check(f"reduce_scatter {tag}", out, x.sum(0)[rank * count:(rank + 1) * count])

        for root in sorted({0, world - 1, per + 1 if per + 1 < world else 1}):
            x = inputs((count,))
            t = x[rank].to(device)
            dist.broadcast(t, src=root)
            check(f"broadcast root {root} {tag}", t, x[root])
            x = inputs((count,))
            t = x[rank].to(device)
            dist.reduce(t, dst=root)
            if rank == root:
                check(f"reduce root {root} {tag}", t, x.sum(0))
            x = inputs((count,))
            gathered = [torch.empty(count, device=device) for _ in range(world)] if rank == root else None
            dist.gather(x[rank].to(device), gather_list=gathered, dst=root)
            if rank == root:
                check(f"gather root {root} {tag}", torch.stack(gathered), x)
            x = inputs((world, count))
            out = torch.empty(count, device=device)
            dist.scatter(out, scatter_list=list(x[root].to(device).unbind(0)) if rank == root else None, src=root)
            check(f"scatter root {root} {tag}", out, x[root][rank])

        x = inputs((world, count))  # x[r][j]: what rank r sends to rank j
        out = torch.empty(world * count, device=device)
        dist.all_to_all_single(out, x[rank].to(device).flatten())
        check(f"all_to_all {tag}", out, x[:, rank].flatten())

    # Large enough to be cut into chunks when CONCCL_NCCL_HIER_CHUNKS > 1 (chunks of at least 256 KiB).
    big = per * (1 << 18)
    x = inputs((big,))
    t = x[rank].to(device)
    dist.all_reduce(t)
    check(f"all_reduce sum count {big}", t, x.sum(0))
    x = inputs((big,))
    t = x[rank].to(device)
    dist.broadcast(t, src=world - 1)
    check(f"broadcast root {world - 1} count {big}", t, x[world - 1])
    piece = per << 17  # per rank: pieces of at least 256 KiB when cut into 4
    x = inputs((piece,))
    out = torch.empty(world * piece, device=device)
    dist.all_gather_into_tensor(out, x[rank].to(device))
    check(f"all_gather count {piece}", out, x.flatten())
    x = inputs((world * piece,))
    out = torch.empty(piece, device=device)
    dist.reduce_scatter_tensor(out, x[rank].to(device))
    check(f"reduce_scatter count {piece}", out, x.sum(0)[rank * piece:(rank + 1) * piece])

    # Uneven all_to_all: rank r sends (r + j) % 3 + 1 elements to rank j (torch: grouped send/recv).
    sizes = [[(r + j) % 3 + 1 for j in range(world)] for r in range(world)]
    x = inputs((world, 4))
    send = torch.cat([x[rank][j][:sizes[rank][j]] for j in range(world)]).to(device)
    out = torch.empty(sum(sizes[r][rank] for r in range(world)), device=device)
    dist.all_to_all_single(out, send, output_split_sizes=[sizes[r][rank] for r in range(world)],
                           input_split_sizes=sizes[rank])
    check("all_to_allv", out, torch.cat([x[r][rank][:sizes[r][rank]] for r in range(world)]))

    # Send/recv: a ring (every pair r -> r + 1 crosses a node at the node's end, stays inside otherwise).
    x = inputs((4096,))
    out = torch.empty(4096, device=device)
    ops = [dist.P2POp(dist.isend, x[rank].to(device), (rank + 1) % world),
           dist.P2POp(dist.irecv, out, (rank - 1) % world)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    check("send/recv ring", out, x[(rank - 1) % world])
    torch.cuda.synchronize()
    return failures


if __name__ == "__main__":
    sys.exit(main())
