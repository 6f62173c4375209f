"""PyTorch's own fused GEMM + collective ops (async tensor parallelism, torch.ops.symm_mem) on the LLaMA-3 MLP shapes of
conccl's fused-op benchmark (conccl-tp-bench: the same model, op and strategy names, m / n / k as one rank's GEMM),
beside the unfused serial baseline on plain NCCL, for comparison with conccl's ops (include/conccl/ops/,
docs/dependent-overlap.md). One process per GPU:

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/torch/torch_fused_bench.py [--out r.jsonl]

Per model, token count and op, two strategies, each timed with CUDA events (--warmup, then --iters iterations, each
started after a barrier; an iteration's time is the slowest rank's; median / min / max over iterations):
  ag-gemm, the MLP up projection (column parallel): A_shard [tokens/tp, hidden], B [hidden, ffn/tp];
      m = tokens, n = ffn/tp, k = hidden.
      torch-fused  torch.ops.symm_mem.fused_all_gather_matmul(A_shard, [B], 0, group_name) (returns A and [C])
      serial-nccl  dist.all_gather_into_tensor(A, A_shard), then C = A @ B
  gemm-rs, the MLP down projection (row parallel): A [tokens, ffn/tp], B [ffn/tp, hidden], C [tokens/tp, hidden];
      m = tokens, n = hidden, k = ffn/tp.
      torch-fused  torch.ops.symm_mem.fused_matmul_reduce_scatter(A, B, "sum", 0, group_name)
      serial-nccl  P = A @ B, then dist.reduce_scatter_tensor(C, P)
Each fused result is checked against the unfused one on the same data: max |fused - unfused| / max |unfused| must be
<= 2^-6 (bf16 keeps 8 bits: the two differ by a rounding or two of the result and, for the reduce-scatter, of the
partial sums; a missing or stale rank's contribution is off by O(1)); the gathered A must be bit-exact.

Output: one JSON object per line and result (rank 0, stdout and --out): tool, device, model, tokens, m, n, k, tp, op,
strategy, time_ms_median / time_ms_min / time_ms_max, iters, and for torch-fused the check (max_rel_err, check
"OK" / "FAIL") or an error. Exit status: 0 all ran and matched; 1 a fused result did not match or a strategy
raised; 2 PyTorch has no torch.ops.symm_mem fused ops (reported once per op, the NCCL baseline still runs).

Never NVLink multicast (it can take shared GPUs out of service): NCCL_NVLS_ENABLE=0 and
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 are forced before torch starts, and the fused all-gather keeps return_A=True (torch's
multimem all-gather path is taken only without it).
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import warnings

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

MODELS = {"llama3-70b": (8192, 28672), "llama3-405b": (16384, 53248)}  # hidden, ffn
TOLERANCE = 2.0**-6


def log(msg):
    if dist.get_rank() == 0:
        print(msg, flush=True)


def symm_mem_ops(group_name):
    """The fused ops, or a reason why not, after the symmetric-memory setup this PyTorch needs."""
    try:
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError as e:
        return None, None, f"torch.distributed._symmetric_memory cannot be imported: {e}"
    # PyTorch <= 2.8 needs the group registered for symmetric memory; later versions deprecate the call (no-op).
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(group_name)
    found = {}
    for name in ("fused_all_gather_matmul", "fused_matmul_reduce_scatter"):
        try:
            found[name] = getattr(torch.ops.symm_mem, name)
        except (AttributeError, RuntimeError) as e:
            found[name] = None
            log(f"MISSING: torch.ops.symm_mem.{name} in torch {torch.__version__}: {e}")
    return found["fused_all_gather_matmul"], found["fused_matmul_reduce_scatter"], None


def time_ms(fn, warmup, iters):
    """Per-iteration times (ms) of fn on the current stream, the slowest rank's; each iteration after a barrier."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        dist.barrier()
        torch.cuda.synchronize()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    slowest = torch.tensor(times, dtype=torch.float64, device="cuda")
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.tolist()


def rel_err(got, want):
    return ((got.float() - want.float()).abs().max() / want.float().abs().max().clamp_min(1e-30)).item()


def bench_shape(args, model, tokens, op, fused, group_name, tp, rank, emit):
    hidden, ffn = MODELS[model]
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1000 * rank + tokens)
    randn = lambda *shape, scale=1.0: (torch.randn(*shape, generator=gen, device="cuda") * scale).bfloat16()  # noqa
    if op == "ag-gemm":
        m, n, k = tokens, ffn // tp, hidden
        a_shard = randn(tokens // tp, hidden)
        gen.manual_seed(tokens)  # B: the same on every rank
        b = randn(hidden, n, scale=k**-0.5)
        a_full = torch.empty(tokens, hidden, dtype=torch.bfloat16, device="cuda")
        c = torch.empty(tokens, n, dtype=torch.bfloat16, device="cuda")

        def serial():
            dist.all_gather_into_tensor(a_full, a_shard)
            torch.mm(a_full, b, out=c)

        run_fused = (lambda: fused(a_shard, [b], 0, group_name)) if fused else None
    else:
        m, n, k = tokens, hidden, ffn // tp
        a = randn(tokens, k)
        b = randn(k, hidden, scale=(k * tp) ** -0.5)
        partial = torch.empty(tokens, hidden, dtype=torch.bfloat16, device="cuda")
        c = torch.empty(tokens // tp, hidden, dtype=torch.bfloat16, device="cuda")

        def serial():
            torch.mm(a, b, out=partial)
            dist.reduce_scatter_tensor(c, partial)

        run_fused = (lambda: fused(a, b, "sum", 0, group_name)) if fused else None
    base = dict(tool="torch-fused-bench", device=torch.cuda.get_device_name(), model=model, tokens=tokens, m=m, n=n,
                k=k, tp=tp, op=op, dtype="bf16", iters=args.iters)

    serial()
    torch.cuda.synchronize()
    want_c = c.clone()
    want_a = a_full.clone() if op == "ag-gemm" else None
    ok = True
    for strategy, fn in (("serial-nccl", serial), ("torch-fused", run_fused)):
        record = dict(base, strategy=strategy)
        if fn is None:
            emit(dict(record, error=f"torch.ops.symm_mem fused op missing in torch {torch.__version__}"))
            continue
        try:
            if strategy == "torch-fused":  # check the first result against the unfused one
                out = fn()
                got_a, got_c = (out[0], out[1][0]) if op == "ag-gemm" else (None, out)
                # Every rank's check, so that rank 0's record is the worst over ranks.
                worst = torch.tensor([rel_err(got_c, want_c), float(got_a is not None and want_a is not None and
                                                                    not torch.equal(got_a, want_a))], device="cuda")
                dist.all_reduce(worst, op=dist.ReduceOp.MAX)
                err, exact_a = worst[0].item(), worst[1].item() == 0.0
                good = err <= TOLERANCE and exact_a
                ok = ok and good
                record.update(max_rel_err=err, gathered_a_exact=exact_a if op == "ag-gemm" else None,
                              check="OK" if good else "FAIL")
            times = time_ms(fn, args.warmup, args.iters)
            record.update(time_ms_median=statistics.median(times), time_ms_min=min(times), time_ms_max=max(times))
        except Exception as e:  # noqa: BLE001 - reported as a result; the same on every rank, so no rank hangs
            ok = False
            record.update(error=f"{type(e).__name__}: {e}"[:500])
        emit(record)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--tokens", default="2048,4096,8192,16384", help="comma-separated token counts")
    parser.add_argument("--ops", default="ag-gemm,gemm-rs", help="comma-separated: ag-gemm (or ag), gemm-rs (or rs)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--out", help="also append the JSON lines to this file (rank 0)")
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank),
                            timeout=datetime.timedelta(minutes=5))
    rank, tp = dist.get_rank(), dist.get_world_size()
    group_name = dist.group.WORLD.group_name
    out = open(args.out, "a") if args.out and rank == 0 else None

    def emit(record):
        if rank == 0:
            line = json.dumps(record)
            print(line, flush=True)
            if out:
                out.write(line + "\n")
                out.flush()

    log(f"torch {torch.__version__}, cuda {torch.version.cuda}, nccl {torch.cuda.nccl.version()}, tp {tp}, "
        f"{torch.cuda.get_device_name()}")
    ag, rs, why = symm_mem_ops(group_name)
    if why:
        log(f"MISSING: {why}")
    ok, missing = True, ag is None or rs is None
    for model in args.models.split(","):
        hidden, ffn = MODELS[model]
        for tokens in (int(t) for t in args.tokens.split(",")):
            if tokens % tp or ffn % tp:
                log(f"skip {model} tokens={tokens}: not divisible by tp={tp}")
                continue
            for op in args.ops.split(","):
                op = {"ag": "ag-gemm", "rs": "gemm-rs"}.get(op, op)
                if op not in ("ag-gemm", "gemm-rs"):
                    parser.error(f"--ops: unknown op {op!r}")
                fused = ag if op == "ag-gemm" else rs
                ok = bench_shape(args, model, tokens, op, fused, group_name, tp, rank, emit) and ok
                torch.cuda.empty_cache()
    log("fused-bench: " + ("OK" if ok and not missing else "FAIL" if not ok else "MISSING fused op(s)"))
    if out:
        out.close()
    dist.destroy_process_group()
    sys.exit(1 if not ok else 2 if missing else 0)


if __name__ == "__main__":
    main()
