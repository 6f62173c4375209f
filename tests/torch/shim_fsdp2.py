"""FSDP2 (torch.distributed.fsdp.fully_shard) training of a small transformer, for comparing NCCL and the conccl
shim: same seed, same synthetic data, same global batch, per-step losses and step times written to a JSON file.

    # under torchrun (NCCL backend; preload the shim or not):
    python -m torch.distributed.run --nproc-per-node 2 tests/torch/shim_fsdp2.py --out fsdp.json
    # the single-process reference of the same global batch (no torch.distributed at all):
    python tests/torch/shim_fsdp2.py --reference --world 2 --out ref.json
    python tests/torch/compare_losses.py ref.json fsdp.json

Why the reference is the same computation: rank r of W trains on samples [r*b, (r+1)*b) of each step's global batch
of W*b samples; its loss is the mean over its b samples and FSDP averages the gradients over ranks (ReduceOp.AVG, or a
PreMulSum of 1/F with --divide-factor F), so the update uses (W/F) * (gradient of the mean loss over the W*b samples),
which is what the reference computes in one process on the whole global batch. Only the rounding differs (order of
the reductions, sharded vs whole tensors), which compare_losses.py's tolerance covers. On one GPU plain NCCL cannot
run W >= 2 ranks (it refuses ranks sharing a GPU), so the reference is the only comparison there.

The model: token embedding, L pre-norm transformer encoder layers (dropout 0), a final norm and a vocabulary
projection; next-token loss on random tokens with a fixed structure (so the loss falls). Initialised from --seed on
the CPU, identically on every rank, before sharding.
"""
import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyLM(nn.Module):
    def __init__(self, vocab, dim, layers, heads):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(dim, heads, dim_feedforward=4 * dim, dropout=0.0, batch_first=True,
                                       norm_first=True) for _ in range(layers)
        ])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens):
        seq = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=tokens.device)
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h, src_mask=mask, is_causal=True)
        return self.head(self.norm(h))


def batch(args, step, first, count, device):
    """Samples [first, first+count) of step `step`'s global batch: same bytes whichever process makes them."""
    g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
    # A learnable structure: token t+1 = (a * token t + c) mod vocab, for a per-sample (a, c), with 10% noise.
    n = args.world * args.batch
    start = torch.randint(0, args.vocab, (n, 1), generator=g)
    a = torch.randint(1, 7, (n, 1), generator=g)
    c = torch.randint(0, args.vocab, (n, 1), generator=g)
    noise = torch.rand(n, args.seq + 1, generator=g) < 0.1
    rand_tok = torch.randint(0, args.vocab, (n, args.seq + 1), generator=g)
    toks = [start]
    for _ in range(args.seq):
        toks.append((a * toks[-1] + c) % args.vocab)
    seqs = torch.where(noise, rand_tok, torch.cat(toks, 1))
    seqs = seqs[first:first + count].to(device)
    return seqs[:, :-1], seqs[:, 1:]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_model(args):
    torch.manual_seed(args.seed)
    return TinyLM(args.vocab, args.dim, args.layers, args.heads)


def make_optimizer(args, params):
    # SGD with momentum: the update is proportional to the gradient, so a wrong reduction (a missing rank, a wrong
    # divide factor) moves the losses at once (Adam would hide a scale error).
    return torch.optim.SGD(params, lr=args.lr, momentum=0.9)


def run_reference(args, device):
    model = build_model(args).to(device)
    opt = make_optimizer(args, model.parameters())
    scale = args.world / args.divide_factor if args.divide_factor else 1.0
    losses, times = [], []
    for step in range(args.steps):
        sync(device)
        t0 = time.perf_counter()
        x, y = batch(args, step, 0, args.world * args.batch, device)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        (loss * scale).backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    return losses, times, {"mode": "reference", "processes": 1}


def run_fsdp(args, device):
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    kw = {"device_id": device} if args.device_id else {}
    dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=args.timeout_s), **kw)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != args.world:
        raise SystemExit(f"--world {args.world} but the job has {world} ranks")
    model = build_model(args).to(device)
    for layer in model.layers:
        fully_shard(layer)
    fully_shard(model)
    if args.divide_factor:
        # FSDP2 then reduce-scatters with a PreMulSum of 1/F (ncclRedOpCreatePreMulSum) instead of ReduceOp.AVG.
        if not hasattr(model, "set_gradient_divide_factor"):
            raise SystemExit(f"torch {torch.__version__}: FSDPModule has no set_gradient_divide_factor; "
                             "run without --divide-factor")
        # The setter changes only the module's own parameter group (torch's FSDPModule.set_gradient_divide_factor is
        # not recursive): set it on every fully_shard'ed module, or the layers keep ReduceOp.AVG while the reference
        # scales every gradient (the 2% loss gap of run 11, 2026-12-01, was this).
        for module in [*model.layers, model]:
            module.set_gradient_divide_factor(args.divide_factor)
    opt = make_optimizer(args, model.parameters())
    losses, times = [], []
    for step in range(args.steps):
        sync(device)
        t0 = time.perf_counter()
        x, y = batch(args, step, rank * args.batch, args.batch, device)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # The loss of the global batch: the mean of the ranks' means (equal batch sizes).
        report = loss.detach().clone()
        dist.all_reduce(report, op=dist.ReduceOp.AVG)
        losses.append(report.item())  # .item() synchronises the device: the step time includes everything
        times.append(time.perf_counter() - t0)
        if step < 3 or step % 10 == 0:  # progress, so that a run cut by a timeout shows how far it got
            print(f"[rank {rank}] step {step} loss {losses[-1]:.4f} {times[-1] * 1e3:.1f} ms", file=sys.stderr,
                  flush=True)
    meta = {"mode": "fsdp2", "processes": world, "backend": args.backend}
    print(f"[rank {rank}] training done; barrier and destroy", file=sys.stderr, flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return losses, times, meta, rank


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="JSON file: losses, step times, the settings")
    p.add_argument("--reference", action="store_true", help="one process, the whole global batch, no collectives")
    p.add_argument("--world", type=int, default=int(os.environ.get("WORLD_SIZE", "1")),
                   help="ranks whose global batch to use (reference: the W of the run it is compared with)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--divide-factor", type=float, default=None,
                   help="FSDP gradient divide factor F (!= world makes FSDP use a PreMulSum op of 1/F)")
    p.add_argument("--backend", default="nccl")
    p.add_argument("--no-device-id", dest="device_id", action="store_false")
    p.add_argument("--timeout-s", type=int, default=300)
    args = p.parse_args()

    # Deterministic kernels, so two runs differ only by the collectives (a rerun of the same mode must match exactly).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS determinism needs it before first use
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    ndev = torch.cuda.device_count()
    device = torch.device("cuda", local_rank % ndev) if ndev else torch.device("cpu")
    if ndev:
        torch.cuda.set_device(device)

    rank = 0
    if args.reference:
        losses, times, meta = run_reference(args, device)
    else:
        losses, times, meta, rank = run_fsdp(args, device)
    if rank == 0:
        steady = sorted(times[5:]) or sorted(times)
        result = {
            **meta,
            "world": args.world, "steps": args.steps, "batch_per_rank": args.batch, "seq": args.seq,
            "vocab": args.vocab, "dim": args.dim, "layers": args.layers, "lr": args.lr, "seed": args.seed,
            "divide_factor": args.divide_factor, "device": str(device), "torch": torch.__version__,
            "losses": losses, "step_times_s": times,
            "step_time_median_s": steady[len(steady) // 2],
            "step_time_p90_s": steady[min(len(steady) - 1, int(0.9 * len(steady)))],
        }
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(f"{meta['mode']}: {args.steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}, median step "
              f"{result['step_time_median_s'] * 1e3:.1f} ms -> {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
