#!/usr/bin/env python3
"""GPU check of conccl.torch (the fused ops as PyTorch custom ops) under `conccl run`: each op, eager and under
torch.compile, against PyTorch's unfused computation on the same ranks (all_gather_into_tensor + matmul; matmul +
reduce_scatter_tensor). Exit status 0 = every check passed.

    conccl run python -m torch.distributed.run --nproc-per-node 2 tools/train_bench/check_torch_ops.py
Tolerance: 2^-7 of max|C| (one bf16 rounding of the result, 2^-8, with margin; the sums run in another order).
"""
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
    import conccl.torch as ct

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234 + rank)
    ok = True

    def report(name, got, want):
        nonlocal ok
        err = (got.float() - want.float()).abs().max().item() / max(want.float().abs().max().item(), 1e-30)
        good = err <= 2.0**-7
        flag = torch.tensor([0.0 if good else 1.0], device=device)
        dist.all_reduce(flag)
        if rank == 0:
            print(f"{name}: max error {err:.2e} of max|C| (rank 0), failing ranks {int(flag.item())}: "
                  f"{'OK' if flag.item() == 0 else 'FAIL'}", flush=True)
        ok = ok and flag.item() == 0

    m, k, n = 256, 1024, 512
    a_shard = torch.randn(m, k, dtype=torch.bfloat16, device=device)
    b = torch.randn(k, n, dtype=torch.bfloat16, device=device) / k**0.5
    dist.broadcast(b, 0)
    gathered = torch.empty(world * m, k, dtype=torch.bfloat16, device=device)
    dist.all_gather_into_tensor(gathered, a_shard)
    want = gathered @ b
    a_full, c = ct.all_gather_matmul(a_shard, b)
    report("all_gather_matmul eager (A gathered exactly: %s)" % torch.equal(a_full, gathered), c, want)
    name = dist.group.WORLD.group_name  # outside the compiled functions: a plain string constant for dynamo
    compiled = torch.compile(lambda x, y: torch.ops.conccl.all_gather_matmul(x, y, name)[1] * 2.0, fullgraph=True)
    report("all_gather_matmul torch.compile", compiled(a_shard, b), want * 2.0)

    a = torch.randn(world * m, k, dtype=torch.bfloat16, device=device)
    b2 = torch.randn(k, n, dtype=torch.bfloat16, device=device) / (world * k) ** 0.5
    partial = a @ b2
    want = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    dist.reduce_scatter_tensor(want, partial.float().to(torch.bfloat16))
    report("matmul_reduce_scatter eager", ct.matmul_reduce_scatter(a, b2), want)
    compiled = torch.compile(lambda x, y: torch.ops.conccl.matmul_reduce_scatter(x, y, name) + 1.0, fullgraph=True)
    report("matmul_reduce_scatter torch.compile", compiled(a, b2), want + 1.0)

    torch.cuda.synchronize()
    ct.release()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("OK" if ok else "FAIL", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
