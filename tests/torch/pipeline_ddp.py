"""torch.distributed.pipelining beside DDP (issue 24 item 6, case 3): a small MLP split in two pipeline stages, each
stage replicated over the data-parallel dimension with DistributedDataParallel.

  4 processes: mesh (dp=2, pp=2) = [[0, 1], [2, 3]]: pipeline groups {0,1} and {2,3} (stage 0 on ranks 0 and 2), DDP
               groups {0,2} (stage 0) and {1,3} (stage 1). Replica d trains on slice d of each global batch.
  2 processes: the two stages only (dp = 1, no DDP).

Cases: gpipe (ScheduleGPipe) and 1f1b (Schedule1F1B), 4 micro-batches, 4 SGD steps each, from the same seed. The
reference is the unsplit model trained in this process on the whole global batch (dp x batch) with the same
optimizer: the per-micro-batch loss is divided by the number of micro-batches (with the schedule's own gradient
scaling off where this torch has it), so the summed micro-batch gradients are the gradient of the replica's mean
loss, and DDP's average over replicas makes it the global batch's. Checked: the global loss of every step (rtol
1e-4) and every parameter's update p_final - p_init (within 2e-3 of the reference's largest update entry) on every
rank, for the stage that rank holds.

    python -m torch.distributed.run --standalone --nproc-per-node 4 tests/torch/pipeline_ddp.py
    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/pipeline_ddp.py --backend gloo --device cpu
"""
import inspect
import os
import sys

import tcommon

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

DIMS = [256, 512, 512, 512, 256]
MICRO = 4
STEPS = 4


def full_model(seed):
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(DIMS[:-1], DIMS[1:])):
        layers.append(nn.Linear(a, b))
        if i + 2 < len(DIMS):
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


def split(model):
    """Stage 0: the first two Linear layers (and their activations), stage 1: the rest."""
    mods = list(model.children())
    cut = 4  # Linear, Tanh, Linear, Tanh | Linear, Tanh, Linear
    return nn.Sequential(*mods[:cut]), nn.Sequential(*mods[cut:])


def data(step, n, seed, dev):
    g = torch.Generator().manual_seed(seed * 104729 + step)
    return torch.randn(n, DIMS[0], generator=g).to(dev), torch.randn(n, DIMS[-1], generator=g).to(dev)


def reference(seed, n, dev):
    model = full_model(seed).to(dev)
    s0, s1 = split(model)
    p0 = [[p.detach().clone() for p in s.parameters()] for s in (s0, s1)]
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x, y = data(step, n, seed, dev)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, p0, [[p.detach().clone() for p in s.parameters()] for s in (s0, s1)]


def run_schedule(ctx, sched_name):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    from torch.nn.parallel import DistributedDataParallel as DDP
    rank, world, dev = ctx.rank, ctx.world, ctx.device
    pp = 2
    if world % pp:
        raise SystemExit(f"world {world} is not a multiple of {pp} stages")
    dp = world // pp
    stage, replica = rank % pp, rank // pp
    seed, batch = 101 if sched_name == "gpipe" else 202, 8 * MICRO  # per replica
    # Groups (every rank calls every new_group): pipelines are rows, DDP groups columns of [[0,1],[2,3]].
    pp_groups = [dist.new_group([d * pp + s for s in range(pp)]) for d in range(dp)]
    dp_groups = [dist.new_group([d * pp + s for d in range(dp)]) for s in range(pp)] if dp > 1 else None
    ref_losses, ref_p0, ref_p = reference(seed, batch * dp, dev)
    mine = split(full_model(seed).to(dev))[stage]
    p_init = [p.detach().clone() for p in mine.parameters()]
    mod = mine
    if dp > 1:
        # find_unused_parameters=True: DDP then never rebuilds its buckets, whose first-iteration bookkeeping
        # trips an internal assert when the pipeline stage runs the backward (torch 2.15 on gloo, seen here).
        mod = DDP(mine, process_group=dp_groups[stage], device_ids=[dev.index] if ctx.cuda else None,
                  find_unused_parameters=True)
    pstage = PipelineStage(mod, stage, pp, dev, group=pp_groups[replica])

    def loss_fn(out, target):
        return F.mse_loss(out, target) / MICRO

    cls = ScheduleGPipe if sched_name == "gpipe" else Schedule1F1B
    kw = {}
    if "scale_grads" in inspect.signature(cls.__init__).parameters:
        kw["scale_grads"] = False  # this script divides the loss itself (above), whatever the version does
    schedule = cls(pstage, n_microbatches=MICRO, loss_fn=loss_fn, **kw)
    opt = torch.optim.SGD(mine.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(STEPS):
        x, y = data(step, batch * dp, seed, dev)
        x, y = x[replica * batch:(replica + 1) * batch], y[replica * batch:(replica + 1) * batch]
        opt.zero_grad(set_to_none=True)
        if stage == 0:
            schedule.step(x)
            local = 0.0
        else:
            mb_losses = []
            schedule.step(target=y, losses=mb_losses)
            local = float(sum(float(v) for v in mb_losses))  # the replica's mean loss
        opt.step()
        t = torch.tensor([local], dtype=torch.float64)
        dist.all_reduce(t, group=ctx.cpu_pg)
        losses.append(t.item() / dp)
    ctx.chk.close(f"{sched_name} losses", losses, ref_losses, rtol=1e-4)
    worst = 0.0
    for i, (a, b, q0, q0r) in enumerate(zip(mine.parameters(), ref_p[stage], p_init, ref_p0[stage])):
        ctx.chk.exact(f"{sched_name} stage {stage} param {i} init", q0, q0r)
        du, dr = a.detach().double().cpu() - q0.double().cpu(), b.double().cpu() - q0r.double().cpu()
        rel = float((du - dr).abs().max()) / (float(dr.abs().max()) or 1.0)
        worst = max(worst, rel)
        ctx.chk.true(f"{sched_name} stage {stage} param {i} update", rel <= 2e-3,
                     f"differs from the reference's by {rel:.3e} of its largest entry")
    ctx.notes[f"{sched_name}_loss"] = f"{losses[0]:.5f}->{losses[-1]:.5f}"
    ctx.notes[f"{sched_name}_layout"] = f"pp{pp}xdp{dp}"
    ctx.notes[f"{sched_name}_max_update_rel_rank0"] = f"{worst:.2e}"


def main():
    p = tcommon.base_parser(__doc__)
    p.add_argument("--cases", default="gpipe,1f1b")
    args = p.parse_args()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    ctx = tcommon.setup(args)
    cases = [("gpipe", lambda c: run_schedule(c, "gpipe")), ("1f1b", lambda c: run_schedule(c, "1f1b"))]
    failed = tcommon.run_cases(ctx, cases, tcommon.parse_cases(args.cases))
    return tcommon.finish(ctx, failed)


if __name__ == "__main__":
    sys.exit(main())
