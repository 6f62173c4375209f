"""torch.distributed's NCCL backend, unchanged, checked on fresh random data: the collectives PyTorch programs use,
in float32 and bfloat16, small and > 8 MB, eager and inside a captured CUDA graph, plus new_group (ncclCommSplit)
and PreMulSum (host and device scalars). Every rank generates every rank's input from known seeds, so each rank
computes the reference itself; any mismatch makes the run exit non-zero with the case named.

Run it under torchrun, with or without the conccl shim preloaded:
    LD_PRELOAD=build/libconccl_nccl.so python -m torch.distributed.run --nproc-per-node 2 tests/torch/shim_collectives.py
Ranks may share a GPU (device = local_rank % device_count): plain NCCL refuses that, conccl allows it, so on a one-GPU
machine this exercises the shim with 2 processes on one GPU.

Tolerances (sums only; max, gathers, all-to-all, broadcast and point-to-point must be bit-exact): the libraries add
in different orders (conccl accumulates fp16/bf16 in fp32 and rounds once, NCCL rounds at each ring step), so the
check is the classic bound for a sum of n terms in any order with rounding unit u at each step:
|computed - exact| <= n * u * sum_r |x_r| (+ one rounding of the result), with u = 2^-24 (fp32) or 2^-8 (bf16).
A wrong result (a missing rank, a wrong op, stale data) is off by about |x_r| itself, far above that bound.
"""
import argparse
import datetime
import os
import sys
import threading
import time
import zlib

import torch
import torch.distributed as dist

FAILURES = []
CHECKS = 0


def log(msg):
    print(f"[rank {dist.get_rank() if dist.is_initialized() else '?'}] {msg}", flush=True)


def unit_roundoff(dtype):
    return {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}[dtype]


def gen(seed_parts, n, dtype, device):
    """The input of one (rank, case): the same on every rank that generates it (Philox on the device)."""
    g = torch.Generator(device=device)
    g.manual_seed(zlib.crc32(repr(seed_parts).encode()))  # not hash(): str hashing is salted per process
    return torch.randn(n, generator=g, device=device, dtype=torch.float32).to(dtype)


def check_exact(name, got, want):
    global CHECKS
    CHECKS += 1
    if got.shape != want.shape or not torch.equal(got, want):
        bad = (got != want).nonzero()
        first = bad[0].item() if bad.numel() else -1
        FAILURES.append(f"{name}: {bad.numel()} of {want.numel()} elements differ (bit-exact expected); "
                        f"first at {first}: got {got.flatten()[first].item() if first >= 0 else '?'} "
                        f"want {want.flatten()[first].item() if first >= 0 else '?'}")


def check_sum(name, got, exact64, abs_sum64, nterms, dtype, extra_roundings=1):
    """got: the library's result; exact64: the exact sum in float64; abs_sum64: sum of |terms| in float64."""
    global CHECKS
    CHECKS += 1
    u = unit_roundoff(dtype)
    bound = (nterms + extra_roundings) * u * abs_sum64 + 1e-30
    err = (got.double() - exact64).abs()
    worst = (err / bound).max().item() if err.numel() else 0.0
    if not torch.all(err <= bound):
        i = int((err - bound).argmax())
        FAILURES.append(f"{name}: error {err.flatten()[i].item():.3e} above the rounding bound "
                        f"{bound.flatten()[i].item():.3e} at {i} (got {got.flatten()[i].item()}, "
                        f"exact {exact64.flatten()[i].item()})")
    return worst


class Case:
    """Inputs of every rank for one case name, made lazily, identical on every rank."""

    def __init__(self, tag, world, device, dtype):
        self.tag, self.world, self.device, self.dtype = tag, world, device, dtype

    def input(self, rank, n, salt=""):
        return gen((self.tag, salt, rank, n, str(self.dtype)), n, self.dtype, self.device)


def run_reductions(args, world, rank, device, dtype, n, it):
    case = Case(f"red{it}", world, device, dtype)
    xs = [case.input(r, n) for r in range(world)]
    x64 = torch.stack([x.double() for x in xs])
    exact, abs_sum = x64.sum(0), x64.abs().sum(0)
    tag = f"{dtype} n={n}"

    t = xs[rank].clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    check_sum(f"all_reduce sum {tag}", t, exact, abs_sum, world, dtype)

    if not args.cpu_gloo:  # gloo has no AVG
        t = xs[rank].clone()
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        # NCCL's avg pre-divides each term, conccl divides the sum: one more rounding either way.
        check_sum(f"all_reduce avg {tag}", t, exact / world, abs_sum / world, world, dtype, extra_roundings=2)

    t = xs[rank].clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check_exact(f"all_reduce max {tag}", t, torch.stack(xs).max(0).values)

    # reduce_scatter_tensor: input world*m, output m (n rounded down to a multiple of world).
    m = max(1, n // world)
    ins = [case.input(r, m * world, "rs") for r in range(world)]
    out = torch.empty(m, dtype=dtype, device=device)
    dist.reduce_scatter_tensor(out, ins[rank].clone(), op=dist.ReduceOp.SUM)
    s64 = torch.stack([x.double() for x in ins])[:, rank * m:(rank + 1) * m]
    check_sum(f"reduce_scatter sum {tag}", out, s64.sum(0), s64.abs().sum(0), world, dtype)

    # reduce to root 0 (sum), in place on every rank as torch does.
    t = xs[rank].clone()
    dist.reduce(t, dst=0, op=dist.ReduceOp.SUM)
    if rank == 0:
        check_sum(f"reduce sum root 0 {tag}", t, exact, abs_sum, world, dtype)

    # PreMulSum (ncclRedOpCreatePreMulSum): sum over ranks of round(factor * x_r). Host scalar and device scalar.
    # gloo has no PreMulSum. bf16 is left out: torch 2.11 hands NCCL a float scalar labelled bf16
    # (unpackPreMulSum<float, ncclBfloat16>; a device factor must be a float32 tensor), which NCCL itself would read
    # as 2 bytes of that float, so there is no NCCL behaviour worth matching there.
    if args.premul and not args.cpu_gloo and dtype != torch.bfloat16:
        for kind in ("host", "device"):
            factor = 1.0 / (world + 1.5)
            f_arg = factor if kind == "host" else torch.tensor([factor], dtype=dtype, device=device)
            op = dist._make_nccl_premul_sum(f_arg)
            f_t = torch.tensor(factor, dtype=dtype, device=device)  # the scalar as the datatype holds it
            terms = torch.stack([(x * f_t).double() for x in xs])  # each product rounded to dtype, as NCCL
            t = xs[rank].clone()
            dist.all_reduce(t, op=op)
            check_sum(f"all_reduce premul({kind}) {tag}", t, terms.sum(0), terms.abs().sum(0), world, dtype)
            out = torch.empty(m, dtype=dtype, device=device)
            dist.reduce_scatter_tensor(out, ins[rank].clone(), op=op)
            rterms = torch.stack([(x * f_t).double() for x in ins])[:, rank * m:(rank + 1) * m]
            check_sum(f"reduce_scatter premul({kind}) {tag}", out, rterms.sum(0), rterms.abs().sum(0), world, dtype)


def run_movement(world, rank, device, dtype, n, it):
    case = Case(f"mov{it}", world, device, dtype)
    tag = f"{dtype} n={n}"
    m = max(1, n // world)

    xs = [case.input(r, m, "ag") for r in range(world)]
    out = torch.empty(m * world, dtype=dtype, device=device)
    dist.all_gather_into_tensor(out, xs[rank])
    check_exact(f"all_gather {tag}", out, torch.cat(xs))

    root = world - 1
    t = case.input(root, n, "bc") if rank == root else torch.zeros(n, dtype=dtype, device=device)
    dist.broadcast(t, src=root)
    check_exact(f"broadcast root {root} {tag}", t, case.input(root, n, "bc"))

    # all_to_all_single, even splits: block p of rank r goes to rank p.
    ins = [case.input(r, m * world, "a2a") for r in range(world)]
    out = torch.empty(m * world, dtype=dtype, device=device)
    dist.all_to_all_single(out, ins[rank])
    check_exact(f"all_to_all even {tag}", out, torch.cat([ins[p][rank * m:(rank + 1) * m] for p in range(world)]))

    # all_to_all_single, uneven splits (one of them 0, as MoE routing produces): split[r][p] elements r -> p.
    base = max(1, m // 4)
    split = [[0 if (r + p) % 3 == 2 else base * (1 + (r + 2 * p) % 4) for p in range(world)] for r in range(world)]
    ins = [case.input(r, sum(split[r]), "a2av") for r in range(world)]
    offs = [[sum(split[r][:p]) for p in range(world)] for r in range(world)]
    want = torch.cat([ins[p][offs[p][rank]:offs[p][rank] + split[p][rank]] for p in range(world)])
    out = torch.empty(sum(split[p][rank] for p in range(world)), dtype=dtype, device=device)
    dist.all_to_all_single(out, ins[rank], output_split_sizes=[split[p][rank] for p in range(world)],
                           input_split_sizes=split[rank])
    check_exact(f"all_to_all uneven {tag}", out, want)

    # send/recv around the ring (batch_isend_irecv: one group, both directions).
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    mine = case.input(rank, m, "ring")
    got = torch.empty(m, dtype=dtype, device=device)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, nxt), dist.P2POp(dist.irecv, got, prv)])
    for r in reqs:
        r.wait()
    check_exact(f"send/recv ring {tag}", got, case.input(prv, m, "ring"))


def run_subgroups(world, rank, device):
    """new_group: with init_process_group(device_id=...) torch makes these with ncclCommSplit (all parent ranks call
    it; ranks outside a group pass NCCL_SPLIT_NOCOLOR)."""
    dtype = torch.float32
    case = Case("sub", world, device, dtype)
    n = 4097
    everyone = dist.new_group(ranks=list(range(world)))
    xs = [case.input(r, n) for r in range(world)]
    t = xs[rank].clone()
    dist.all_reduce(t, group=everyone)
    x64 = torch.stack([x.double() for x in xs])
    check_sum("new_group(all) all_reduce", t, x64.sum(0), x64.abs().sum(0), world, dtype)
    if world >= 2:
        evens = [r for r in range(world) if r % 2 == 0]
        g = dist.new_group(ranks=evens)
        if rank in evens:
            t = xs[rank].clone()
            dist.all_reduce(t, group=g)
            e64 = torch.stack([xs[r].double() for r in evens])
            check_sum(f"new_group({evens}) all_reduce", t, e64.sum(0), e64.abs().sum(0), len(evens), dtype)


def capture_after_warmup(ops, after_warmup=None):
    """Runs ops() three times on a side stream (the warm-up torch's CUDA graph docs ask for), calls after_warmup(), then
    captures ops() into a CUDA graph and returns it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            ops()
    torch.cuda.current_stream().wait_stream(side)
    if after_warmup is not None:
        after_warmup()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops()
    return graph


def run_graph(args, world, rank, device, dtype, n):
    """A few collectives captured once into a CUDA graph, replayed on new data (copied into the static inputs)."""
    m = max(1, n // world)
    a_in = torch.zeros(n, dtype=dtype, device=device)
    g_in = torch.zeros(m, dtype=dtype, device=device)
    r_in = torch.zeros(m * world, dtype=dtype, device=device)
    g_out = torch.empty(m * world, dtype=dtype, device=device)
    r_out = torch.empty(m, dtype=dtype, device=device)
    factor = 0.25
    # Not for bf16: torch hands NCCL a float scalar labelled bf16 (see run_reductions).
    premul = dist._make_nccl_premul_sum(factor) if args.premul and dtype != torch.bfloat16 else None
    p_in = torch.zeros(n, dtype=dtype, device=device)

    def ops():
        dist.all_reduce(a_in)
        dist.all_gather_into_tensor(g_out, g_in)
        dist.reduce_scatter_tensor(r_out, r_in)
        if premul is not None:
            dist.all_reduce(p_in, op=premul)

    graph = capture_after_warmup(ops)
    tag = f"graph {dtype} n={n}"
    for replay in range(args.replays):
        case = Case(f"graph{replay}", world, device, dtype)
        xs = [case.input(r, n, "a") for r in range(world)]
        gs = [case.input(r, m, "g") for r in range(world)]
        rs = [case.input(r, m * world, "r") for r in range(world)]
        ps = [case.input(r, n, "p") for r in range(world)]
        a_in.copy_(xs[rank])
        g_in.copy_(gs[rank])
        r_in.copy_(rs[rank])
        p_in.copy_(ps[rank])
        graph.replay()
        torch.cuda.synchronize()
        x64 = torch.stack([x.double() for x in xs])
        check_sum(f"{tag} replay {replay} all_reduce", a_in, x64.sum(0), x64.abs().sum(0), world, dtype)
        check_exact(f"{tag} replay {replay} all_gather", g_out, torch.cat(gs))
        s64 = torch.stack([x.double() for x in rs])[:, rank * m:(rank + 1) * m]
        check_sum(f"{tag} replay {replay} reduce_scatter", r_out, s64.sum(0), s64.abs().sum(0), world, dtype)
        if premul is not None:
            f_t = torch.tensor(factor, dtype=dtype, device=device)
            terms = torch.stack([(x * f_t).double() for x in ps])
            check_sum(f"{tag} replay {replay} all_reduce premul", p_in, terms.sum(0), terms.abs().sum(0), world,
                      dtype)
    del graph


def run_graph_fresh(args, world, rank, device, dtype, n):
    """Collectives on tensors allocated inside the capture (the graph's private pool), as tensor-parallel graphs do:
    all_reduce(x * 2) and all_gather of a slice of it. Each call maps the peers' new buffers while the capture is in
    progress, after the peers' earlier buffers (the warm-up's, freed) were retired: the situation in which conccl's
    own capture test lost its graph (docs/results/2026-12-04-h200-1gpu-capture-host-time/)."""
    m = max(1, n // world)
    x = torch.zeros(n, dtype=dtype, device=device)
    held = {}

    def ops():
        y = x * 2  # allocated here: inside the capture, from the graph's pool
        dist.all_reduce(y)
        g = torch.empty(m * world, dtype=dtype, device=device)
        dist.all_gather_into_tensor(g, y[:m].contiguous())
        held["y"], held["g"] = y, g

    graph = capture_after_warmup(ops, held.clear)  # the warm-up's tensors freed: the peers retire them
    tag = f"graph, tensors allocated in the capture, {dtype} n={n}"
    for replay in range(args.replays):
        case = Case(f"graphfresh{replay}", world, device, dtype)
        xs = [case.input(r, n, "x") for r in range(world)]
        x.copy_(xs[rank])
        graph.replay()
        torch.cuda.synchronize()
        doubled = torch.stack([(x_r * 2).double() for x_r in xs])
        check_sum(f"{tag} replay {replay} all_reduce", held["y"], doubled.sum(0), doubled.abs().sum(0), world, dtype)
        # Each rank's slice is its reduced y[:m]: the same on every rank.
        check_exact(f"{tag} replay {replay} all_gather", held["g"], held["y"][:m].repeat(world))
    del graph


class StderrTee:
    """Copies what is written to file descriptor 2 (C libraries included) while passing it through unchanged: the
    shim prints one line per communicator there, which is how this script tells which library took it."""

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        self.read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self.chunks = []

        def pump():
            # Keeps draining whatever happens: a pipe left full would block every writer to stderr.
            while True:
                try:
                    chunk = os.read(self.read_end, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                self.chunks.append(chunk)
                try:
                    os.write(self.saved, chunk)
                except OSError:
                    pass

        self.thread = threading.Thread(target=pump, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)  # drops the pipe's last write end: the pump sees EOF
        self.thread.join(timeout=5)
        os.close(self.read_end)
        os.close(self.saved)
        return False

    def text(self):
        return b"".join(self.chunks).decode(errors="replace")


def communicator_paths(text):
    """The shim's per-communicator lines ("conccl-shim: ...: comm 0x.. rank r nranks n cudaDev d -> conccl (...)")."""
    # Only the per-communicator lines: with NCCL_DEBUG=INFO the shim also says "ncclGetUniqueId -> rendezvous at ...".
    lines = [ln for ln in text.splitlines() if "conccl-shim:" in ln and " -> " in ln and " comm 0x" in ln]
    return sorted({ln.split(" -> ")[1].split(" ")[0] for ln in lines}), lines


def which_library():
    """Whether the conccl shim is loaded in this process, and the version the NCCL API reports."""
    shim = None
    with open("/proc/self/maps") as f:
        for line in f:
            if "libconccl_nccl" in line or "nccl-shim/libnccl.so" in line:
                shim = line.split()[-1]
                break
    try:
        v = torch.cuda.nccl.version() if torch.cuda.is_available() else "no CUDA"
    except Exception as e:  # noqa: BLE001 - report, do not fail on it
        v = f"unknown ({e})"
    return shim, v


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="1,1000,65537,3145728",
                   help="element counts per rank; 3145728 fp32 = 12 MiB (> 8 MB), bf16 = 6 MiB")
    p.add_argument("--large-bf16", type=int, default=5 << 20, help="extra bf16 size (> 8 MB: 10 MiB)")
    p.add_argument("--dtypes", default="float32,bfloat16")
    p.add_argument("--replays", type=int, default=3)
    p.add_argument("--no-premul", dest="premul", action="store_false", help="skip PreMulSum cases")
    p.add_argument("--no-graph", dest="graph", action="store_false")
    p.add_argument("--no-device-id", dest="device_id", action="store_false",
                   help="init_process_group without device_id (no eager init, new_group without ncclCommSplit)")
    p.add_argument("--timeout-s", type=int, default=300)
    p.add_argument("--expect-path", choices=["conccl", "NCCL"],
                   help="fail unless the default communicator took this path (read from the shim's stderr line)")
    p.add_argument("--cpu-gloo", action="store_true",
                   help="check this script's own logic without a GPU: gloo on the CPU, without what gloo lacks "
                        "(AVG, PreMulSum, CUDA graphs, device_id)")
    args = p.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.cpu_gloo:
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
        args.graph = False
        ndev = 0
        paths = []
    else:
        ndev = torch.cuda.device_count()
        if ndev == 0:
            print("no CUDA device", file=sys.stderr)
            return 2
        device = torch.device("cuda", local_rank % ndev)  # ranks may share a GPU (conccl allows it, NCCL not)
        torch.cuda.set_device(device)
        kw = {"device_id": device} if args.device_id else {}
        # The communicator is made here (device_id: eager init) or by the first collective: watch stderr for both.
        with StderrTee() as tee:
            dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=args.timeout_s), **kw)
            probe = torch.ones(1, device=device)
            dist.all_reduce(probe)
            torch.cuda.synchronize()
        paths, _ = communicator_paths(tee.text())
    rank, world = dist.get_rank(), dist.get_world_size()
    shim, version = which_library()
    handled = ",".join(paths) if paths else ("none seen" if shim else "NCCL (no shim loaded)")
    log(f"world {world} on {ndev} GPU(s), device {device}; conccl shim loaded: {shim or 'no'}; communicator path "
        f"(the shim's line): {handled}; NCCL version reported: {version}; torch {torch.__version__}")
    if args.expect_path and not args.cpu_gloo:
        got = paths if paths else (["NCCL"] if not shim else [])
        if got != [args.expect_path]:
            FAILURES.append(f"the default communicator took {got or 'an unknown path'}, expected {args.expect_path}")
    t0 = time.time()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",") if d]
    it = 0
    for dtype in dtypes:
        dsizes = sizes + ([args.large_bf16] if dtype == torch.bfloat16 and args.large_bf16 else [])
        for n in dsizes:
            run_reductions(args, world, rank, device, dtype, n, it)
            run_movement(world, rank, device, dtype, n, it)
            it += 1
    dist.barrier()
    run_subgroups(world, rank, device)
    if args.graph:
        for dtype in dtypes:
            run_graph(args, world, rank, device, dtype, 1 << 16)
    dist.barrier()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.time() - t0
    # Every rank reports; the run fails if any rank saw a mismatch (torchrun exits non-zero then).
    status = "FAILED" if FAILURES else "OK"
    log(f"{status}: {CHECKS} checks, {len(FAILURES)} failures, {elapsed:.1f} s")
    for f in FAILURES[:20]:
        log(f"MISMATCH {f}")
    dist.destroy_process_group()
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
