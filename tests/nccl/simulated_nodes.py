"""Simulated nodes on one machine, through the NCCL shim (libconccl_nccl.so preloaded): locality per communicator.

Rank r sits on simulated node r // --per-node as far as the shim is concerned (CONCCL_HOSTID). For the real NCCL,
NCCL_HOSTID is either the same node (--nccl-hostid node: realistic, needs a GPU per rank of a node) or a host per
process (--nccl-hostid proc: what one GPU needs, since NCCL refuses two ranks of one host on one GPU); CONCCL_HOSTID
wins over NCCL_HOSTID in the shim, so the shim's view stays the simulated nodes either way.

Communicators made (every rank checks its results against values computed here):
  world    every rank            -> NCCL when there are 2+ nodes, conccl with one
  node k   the ranks of node k   -> conccl (all on one host)
  rail j   local index j, across -> NCCL when there are 2+ nodes
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

    # The hierarchical all-reduce by hand: reduce-scatter in the node, all-reduce on the rail, all-gather in the node.
    m = per * 4096
    x = torch.arange(m, device=device, dtype=torch.float32) + rank
    shard = torch.empty(m // per, device=device)
    dist.reduce_scatter_tensor(shard, x, group=mine)
    dist.all_reduce(shard, group=rail)
    full = torch.empty(m, device=device)
    dist.all_gather_into_tensor(full, shard, group=mine)
    check("hierarchical all_reduce", full, world * torch.arange(m, device=device, dtype=torch.float32) + world * (world - 1) / 2)

    torch.cuda.synchronize()
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        for f in failures:
            print(f"simulated-nodes rank {rank}: FAIL {f}", flush=True)
        return 1
    print(f"simulated-nodes rank {rank}: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
