#!/usr/bin/env python3
"""End-to-end training benchmark: a LLaMA-3-shaped decoder (model.py) trained with FSDP2 (fully_shard per block,
bf16 parameters, fp32 gradient reduction), optionally on a 2-D mesh with tensor parallelism inside (dp x tp) and
torch.compile, on synthetic data from a fixed seed. One backend per invocation:

    python -m torch.distributed.run --nproc-per-node 8 tools/train_bench/train_bench.py --layers 4 --out nccl.jsonl
    python -m torch.distributed.run --nproc-per-node 8 tools/train_bench/train_bench.py --layers 4 \
        --backend nccl-zero-cta --out nccl0.jsonl
    conccl run python -m torch.distributed.run --nproc-per-node 8 tools/train_bench/train_bench.py --layers 4 \
        --out conccl.jsonl
    python tools/train_bench/compare.py nccl.jsonl nccl0.jsonl conccl.jsonl --plot runs.png

Output (rank 0): a progress line per step on stderr; JSON lines appended to --out (one "step" record per step, one
"summary" record per run: step-time median and spread over the measured steps, tokens/s, MFU, peak memory, every
loss); the table on stdout. MFU's formula: flops.py. When ranks share a GPU (world size > visible GPUs) the summary
says so and its step times are marked as not performance figures.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_config  # noqa: E402
import flops  # noqa: E402
import stats  # noqa: E402

NCCL_CTA_POLICY_ZERO = 2  # nccl.h 2.28


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def init_distributed(cfg, backend, device):
    import torch.distributed as dist

    kwargs = {}
    how = None
    if backend == "nccl-zero-cta":
        # Two ways PyTorch can ask NCCL for zero-CTA (copy-engine) collectives: the communicator config through the
        # process group's options (torch builds whose ncclConfig binding has cta_policy), and NCCL's own variable,
        # read at communicator init. NCCL 2.28 then runs all-gather / all-to-all on copy engines only for buffers in
        # symmetric windows, which FSDP2 does not register by default; NCCL does not report the path it took.
        os.environ["NCCL_CTA_POLICY"] = str(NCCL_CTA_POLICY_ZERO)
        how = ["env NCCL_CTA_POLICY=2"]
        opts = dist.ProcessGroupNCCL.Options()
        if hasattr(opts, "config") and hasattr(opts.config, "cta_policy"):
            opts.config.cta_policy = NCCL_CTA_POLICY_ZERO
            kwargs["pg_options"] = opts
            how.append("ProcessGroupNCCL.Options().config.cta_policy=2")
    dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(seconds=cfg.timeout_s), **kwargs)
    return how


def tp_plan(sequence_parallel: bool):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

    if not sequence_parallel:
        return {}, {
            "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(),
            "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(),
        }
    # Sequence parallel (Megatron-SP, as torchtitan): activations between blocks are sharded on the sequence; each
    # column-parallel projection all-gathers its input and each row-parallel one reduce-scatters its output, which
    # async TP (inductor micro-pipelining) overlaps with the GEMMs.
    top = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
    block = {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(input_layouts=(Shard(1), None, None),
                                        desired_input_layouts=(Replicate(), None, None)),
        "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(), "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
    return top, block


def build(cfg, dp_mesh, tp_mesh, device):
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from model import Transformer

    with torch.device(device):
        model = Transformer(cfg.shape, cfg.seq)
    model.init_weights(torch.Generator(device=device).manual_seed(cfg.seed))  # identical on every rank
    if cfg.tp > 1:
        from torch.distributed.tensor.parallel import parallelize_module

        top, block = tp_plan(cfg.sequence_parallel)
        if top:
            parallelize_module(model, tp_mesh, top)
        for layer in model.layers:
            parallelize_module(layer, tp_mesh, block)
        if cfg.async_tp:
            import torch._inductor.config as inductor_config
            from torch.distributed._symmetric_memory import enable_symm_mem_for_group

            inductor_config._micro_pipeline_tp = True
            enable_symm_mem_for_group(tp_mesh.get_group().group_name)
    if cfg.compile:
        for i, layer in enumerate(model.layers):
            model.layers.register_module(str(i), torch.compile(layer))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mesh=dp_mesh, mp_policy=mp)
    fully_shard(model, mesh=dp_mesh, mp_policy=mp)
    return model


def nccl_version():
    try:
        import torch

        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception as e:  # noqa: BLE001 (reported, not fatal)
        return f"unknown ({e})"


def main(argv=None) -> int:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cfg = bench_config.parse(argv, world)
    try:
        backend = bench_config.resolve_backend(cfg.backend, os.environ)
    except ValueError as e:
        log(f"train_bench: {e}")
        return 2
    label = cfg.label or backend

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh

    from model import synthetic_batch

    ndev = torch.cuda.device_count()
    if ndev == 0:
        log("train_bench: no CUDA device visible (the benchmark trains on GPUs)")
        return 2
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank % ndev)
    torch.cuda.set_device(device)
    zero_cta = init_distributed(cfg, backend, device)
    rank = dist.get_rank()
    gpus = min(world, ndev)
    shared = world > ndev
    mesh_dims = bench_config.mesh_shape(world, cfg.tp)
    if cfg.tp == 1:  # 1-D: FSDP2 over the default group, no sub-communicators
        dp_mesh = init_device_mesh("cuda", (world,), mesh_dim_names=("dp",))
        tp_mesh = None
    else:
        mesh = init_device_mesh("cuda", (mesh_dims["dp"], mesh_dims["tp"]), mesh_dim_names=("dp", "tp"))
        dp_mesh, tp_mesh = mesh["dp"], mesh["tp"]
    dp, dp_rank = mesh_dims["dp"], dp_mesh.get_local_rank()
    if rank == 0:
        for note in cfg.notes:
            log(f"[{label}] note: {note}")
        if shared:
            log(f"[{label}] note: {world} ranks share {ndev} GPU(s): step times are not performance figures")
        log(f"[{label}] {cfg.model} x{cfg.shape.n_layers} layers, seq {cfg.seq}, batch {cfg.batch}/dp-rank, "
            f"mesh dp {dp} x tp {cfg.tp}, compile {cfg.compile}, async TP {cfg.async_tp}, world {world} on {gpus} GPU(s)")

    model = build(cfg, dp_mesh, tp_mesh, device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    total_steps = cfg.warmup + cfg.steps
    losses_dev, times = [], []
    records = []
    for step in range(total_steps):
        x, y = synthetic_batch(cfg.shape.vocab, cfg.seq, step, cfg.seed, dp_rank * cfg.batch, cfg.batch,
                               dp * cfg.batch)
        x, y = x.to(device), y.to(device)
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        losses_dev.append(loss.detach())
        times.append(dt)
        if rank == 0 and cfg.progress_every and (step % cfg.progress_every == 0 or step == total_steps - 1):
            phase = "warm-up" if step < cfg.warmup else "measured"
            log(f"[{label}] step {step + 1}/{total_steps} ({phase}) rank-0 loss {loss.item():.4f} {dt * 1e3:.1f} ms")
    # The loss of the global batch per step: the mean over ranks (TP ranks hold equal copies; dp ranks equal batches).
    losses_t = torch.stack(losses_dev).float()
    dist.all_reduce(losses_t, op=dist.ReduceOp.AVG)
    mem = torch.tensor([torch.cuda.max_memory_allocated(device), torch.cuda.max_memory_reserved(device)],
                       dtype=torch.float64, device=device)
    dist.all_reduce(mem, op=dist.ReduceOp.MAX)
    losses = losses_t.tolist()
    measured = times[cfg.warmup:]
    st = stats.step_stats(measured)
    tokens_per_step = dp * cfg.batch * cfg.seq
    tokens_per_s = tokens_per_step / st["median"]
    f_token = flops.flops_per_token_seq(cfg.shape, cfg.seq)
    summary = {
        "kind": "summary", "label": label, "backend": backend, "world": world, "gpus": gpus, "shared_gpu": shared,
        "performance_figures": not shared, "dp": dp, **{k: v for k, v in cfg.to_dict().items() if k not in ("out",
                                                                                                         "label")},
        "tokens_per_step": tokens_per_step, "step_time_s": st, "tokens_per_s": tokens_per_s,
        "model_flops_per_token": f_token, "tflops_per_gpu": f_token * tokens_per_s / gpus / 1e12,
        "mfu": flops.mfu(f_token, tokens_per_s, gpus),
        "mfu_formula": "(6*N + 12*L*H*Q*T) * tokens/s / (gpus * 989e12); N = parameters minus the token embedding",
        "params": flops.param_counts(cfg.shape.dim, cfg.shape.n_layers, cfg.shape.n_heads, cfg.shape.n_kv_heads,
                                     cfg.shape.ffn_dim, cfg.shape.vocab),
        "peak_mem_gib": {"allocated": mem[0].item() / 2**30, "reserved": mem[1].item() / 2**30},
        "losses": losses, "step_times_s": measured, "warmup_step_times_s": times[:cfg.warmup],
        "zero_cta_request": zero_cta, "torch": torch.__version__, "nccl": nccl_version(),
        "device_name": torch.cuda.get_device_name(device), "host": platform.node(),
        "ld_preload": os.environ.get("LD_PRELOAD", ""),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if rank == 0:
        for i, (l, t) in enumerate(zip(losses, times)):
            records.append({"kind": "step", "label": label, "world": world, "step": i, "warmup": i < cfg.warmup,
                            "loss": l, "time_s": t})
        records.append(summary)
        if cfg.out:
            with open(cfg.out, "a") as f:
                for r in records:
                    f.write(json.dumps(r) + "\n")
        print(stats.format_table([summary]), flush=True)
        print(f"MFU = {summary['mfu_formula']}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
