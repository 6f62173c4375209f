"""Shared by the tests/torch/ scripts that tests/torch/run_all.sh runs (issue 24 item 6): process-group setup for
the three ways they run, seeded inputs, result checks, per-case verdicts agreed over a gloo group, JSON lines.

The three ways a script runs (the same flags everywhere):
  * through the conccl NCCL drop-in (LD_PRELOAD=libconccl_nccl.so): --backend nccl (the default); ranks may share a
    GPU (device = local_rank % device_count);
  * on plain NCCL with ranks sharing one GPU: --sim-hosts sets NCCL_HOSTID=host<rank> in this process before NCCL
    starts (torchrun gives every process the same environment, so it cannot be set outside), plus
    NCCL_SOCKET_IFNAME=lo and NCCL_IB_DISABLE=1 unless already set: NCCL then takes every rank for a host of its own
    (no duplicate-GPU refusal) and moves data over sockets on the loopback;
  * without a GPU, to check a script's own logic: --backend gloo --device cpu.
  * across simulated nodes, through the drop-in (issue 25): --sim-nodes G puts rank r on node r // G for conccl
    (CONCCL_HOSTID=simnode<r // G>), and NCCL_HOSTID=host<rank> lets the real NCCL under the drop-in's rails run
    ranks that share a GPU; a communicator spanning several simulated nodes then runs hierarchically.

NVLink multicast stays off in every process (it can take shared GPUs out of service).
"""
import argparse
import ctypes
import datetime
import json
import os
import sys
import time
import traceback
import zlib

os.environ["NCCL_NVLS_ENABLE"] = "0"
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def add_args(p, timeout_s=120):
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--sim-hosts", action="store_true",
                   help="plain NCCL with ranks sharing a GPU: NCCL_HOSTID=host<rank> (+ NCCL_SOCKET_IFNAME=lo, "
                        "NCCL_IB_DISABLE=1) set in this process before init_process_group")
    p.add_argument("--sim-nodes", type=int, default=0, metavar="G",
                   help="through the drop-in: G ranks per simulated node (CONCCL_HOSTID=simnode<rank // G>, "
                        "NCCL_HOSTID=host<rank>); 0: off")
    p.add_argument("--no-device-id", dest="device_id", action="store_false",
                   help="init_process_group without device_id (lazy communicator, new_group without ncclCommSplit)")
    p.add_argument("--timeout-s", type=float, default=timeout_s, help="init_process_group timeout")
    p.add_argument("--expect-path", choices=["conccl", "NCCL"],
                   help="fail unless the default communicator took this path (the shim's per-communicator line)")
    p.add_argument("--expect-expandable", action="store_true",
                   help="fail unless the CUDA caching allocator really uses expandable segments (checks that "
                        "PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF took effect)")
    p.add_argument("--expect-registered", action="store_true",
                   help="fail unless the drop-in has accepted buffer registrations once the communicator is up "
                        "(checks that TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 reaches it)")
    p.add_argument("--jsonl", help="rank 0 appends one JSON object per case here")
    p.add_argument("--tag", default="", help="label written into the JSON lines (the runner's configuration)")
    return p


def log(msg, rank=None):
    if rank is None:
        rank = dist.get_rank() if dist.is_initialized() else os.environ.get("RANK", "?")
    print(f"[rank {rank}] {msg}", flush=True)


class Ctx:
    """What every case gets: ranks, the device, the gloo group for control and CPU references, the checker."""

    def __init__(self, args, rank, world, local_rank, device, cpu_pg):
        self.args, self.rank, self.world, self.local_rank = args, rank, world, local_rank
        self.device, self.cpu_pg = device, cpu_pg
        self.chk = Checker()
        self.notes = {}  # per case: measured values rank 0 reports
        self.registrations = None  # the drop-in's registration counts at setup (registration_counts())

    @property
    def cuda(self):
        return self.device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)


def simulate_hosts(rank):
    os.environ["NCCL_HOSTID"] = f"host{rank}"
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_IB_DISABLE", "1")


def setup(args, init_probe=True):
    """init_process_group for the chosen way; returns a Ctx. Call before touching CUDA memory."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.sim_hosts and args.backend == "nccl":
        simulate_hosts(rank)
    if args.sim_nodes:
        if args.sim_nodes < 1 or world % args.sim_nodes:
            raise SystemExit(f"--sim-nodes {args.sim_nodes} does not divide WORLD_SIZE {world}")
        os.environ["CONCCL_HOSTID"] = f"simnode{rank // args.sim_nodes}"
        if args.backend == "nccl":
            simulate_hosts(rank)
    timeout = datetime.timedelta(seconds=args.timeout_s)
    paths = []
    if args.device == "cpu":
        if args.backend != "gloo":
            raise SystemExit("--device cpu needs --backend gloo")
        device = torch.device("cpu")
        dist.init_process_group("gloo", timeout=timeout)
    else:
        ndev = torch.cuda.device_count()
        if ndev == 0:
            raise SystemExit("no CUDA device (use --backend gloo --device cpu without a GPU)")
        device = torch.device("cuda", local_rank % ndev)  # ranks may share a GPU
        torch.cuda.set_device(device)
        kw = {"device_id": device} if (args.device_id and args.backend == "nccl") else {}
        from shim_collectives import StderrTee, communicator_paths
        with StderrTee() as tee:
            dist.init_process_group(args.backend, timeout=timeout, **kw)
            if init_probe:
                probe = torch.ones(1, device=device)
                dist.all_reduce(probe)
                torch.cuda.synchronize()
        paths, _ = communicator_paths(tee.text())
    # Control plane on the CPU: verdicts, CPU-side references; never through the library under test.
    cpu_pg = dist.new_group(backend="gloo") if args.backend != "gloo" else dist.group.WORLD
    ctx = Ctx(args, rank, world, local_rank, device, cpu_pg)
    ctx.paths = paths
    lazy_unseen = not init_probe and not (args.device_id and args.backend == "nccl")
    if lazy_unseen:
        ctx.paths = ["not yet made (lazy init)"]
    elif args.expect_path and args.device == "cuda":
        shim = shim_loaded()
        got = paths if paths else (["NCCL"] if not shim else [])
        if got != [args.expect_path]:
            ctx.chk.fail(f"the default communicator took {got or 'an unknown path'}, expected {args.expect_path}")
    # The drop-in's registration counts once the communicator is up (None without the drop-in): the setup line says them.
    ctx.registrations = registration_counts() if args.device == "cuda" else None
    if args.expect_registered and args.device == "cuda":
        counts = ctx.registrations
        if counts is None:
            ctx.chk.fail("--expect-registered: the drop-in is not loaded (no concclNcclShimRegistrationCounts)")
        elif counts["registered"] == 0:
            ctx.chk.fail("PyTorch's register hook was asked for (TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK) but "
                         "the drop-in has accepted no ncclCommRegister once the communicator is up")
    if args.expect_expandable and args.device == "cuda":
        exp = expandable_in_use(device)
        if exp is False:
            ctx.chk.fail("expandable segments were asked for (PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF) but "
                         "the allocator's segments are not expandable")
        ctx.expandable = exp
    else:
        ctx.expandable = expandable_in_use(device) if args.device == "cuda" else None
    if rank == 0:
        log(f"world {world}, device {device}, backend {args.backend}, sim-hosts {args.sim_hosts}, "
            f"sim-nodes {args.sim_nodes or 'off'}, "
            f"shim {shim_loaded() or 'no'}, communicator path {','.join(paths) or '?'}, "
            f"expandable segments {ctx.expandable}, torch {torch.__version__}, "
            f"PYTORCH_ALLOC_CONF={os.environ.get('PYTORCH_ALLOC_CONF', '')!r} "
            f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')!r}")
    return ctx


def shim_loaded():
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libconccl_nccl" in line or "nccl-shim/libnccl.so" in line:
                    return line.split()[-1]
    except OSError:
        pass
    return None


def registration_counts():
    """The drop-in's registration counts of this process (concclNcclShimRegistrationCounts, conccl/nccl_shim.h) as a
    dict (registered, deregistered, windows_registered, windows_deregistered), or None without the drop-in."""
    try:
        fn = ctypes.CDLL(None).concclNcclShimRegistrationCounts  # LD_PRELOAD put the drop-in's symbols in scope
    except (AttributeError, OSError):
        return None
    fn.restype, fn.argtypes = None, [ctypes.POINTER(ctypes.c_uint64)] * 4
    v = [ctypes.c_uint64(0) for _ in range(4)]
    fn(*[ctypes.byref(x) for x in v])
    return dict(zip(("registered", "deregistered", "windows_registered", "windows_deregistered"), (x.value for x in v)))


def expandable_in_use(device):
    """True / False from the allocator's snapshot (a small tensor is allocated first); None if it cannot tell."""
    try:
        keep = torch.empty(1 << 20, dtype=torch.uint8, device=device)
        segs = torch.cuda.memory._snapshot(device).get("segments", [])
        del keep
        flags = [s.get("is_expandable") for s in segs if "is_expandable" in s]
        if not flags:
            return None
        return any(flags)
    except Exception:  # noqa: BLE001 - a report, not a check
        return None


# ---------------------------------------------------------------------------------------------------------------
# Inputs and checks


def gen(seed_parts, n, dtype, device):
    """Seeded input, the same bytes on every rank that makes it (Philox on the device; crc32, not hash())."""
    g = torch.Generator(device=device)
    g.manual_seed(zlib.crc32(repr(seed_parts).encode()))
    return torch.randn(n, generator=g, device=device, dtype=torch.float32).to(dtype)


def unit_roundoff(dtype):
    return {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11,
            torch.float64: 2.0**-53}[dtype]


class Checker:
    def __init__(self):
        self.failures = []
        self.checks = 0

    def fail(self, msg):
        self.failures.append(msg)

    def exact(self, name, got, want):
        self.checks += 1
        got, want = got.detach(), want.detach().to(got.device)
        if got.shape != want.shape:
            self.fail(f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
            return
        if not torch.equal(got, want):
            bad = (got != want).flatten().nonzero()
            i = int(bad[0]) if bad.numel() else 0
            self.fail(f"{name}: {bad.numel()} of {want.numel()} elements differ (bit-exact expected); first at {i}: "
                      f"got {got.flatten()[i].item()} want {want.flatten()[i].item()}")

    def sum_close(self, name, got, exact64, abs64, nterms, dtype, extra_roundings=1):
        """A sum of nterms in any order: |got - exact| <= (n + extra) * u * sum|x| (see shim_collectives.py)."""
        self.checks += 1
        bound = (nterms + extra_roundings) * unit_roundoff(dtype) * abs64.to(got.device) + 1e-30
        err = (got.detach().double() - exact64.to(got.device)).abs()
        if not torch.all(err <= bound):
            i = int((err - bound).flatten().argmax())
            self.fail(f"{name}: error {err.flatten()[i].item():.3e} above the rounding bound "
                      f"{bound.flatten()[i].item():.3e} at {i} (got {got.flatten()[i].item()}, "
                      f"exact {exact64.flatten()[i].item()})")

    def close(self, name, got, want, rtol, atol=0.0):
        self.checks += 1
        got = torch.as_tensor(got).detach().double().cpu()
        want = torch.as_tensor(want).detach().double().cpu()
        if got.shape != want.shape:
            self.fail(f"{name}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
            return float("inf")
        err = (got - want).abs()
        lim = atol + rtol * want.abs()
        worst = float((err / lim.clamp_min(1e-300)).max()) if err.numel() else 0.0
        if not torch.all(err <= lim):
            i = int((err - lim).flatten().argmax())
            self.fail(f"{name}: |got - want| = {err.flatten()[i].item():.3e} > {lim.flatten()[i].item():.3e} at {i} "
                      f"(got {got.flatten()[i].item()}, want {want.flatten()[i].item()}, rtol {rtol:g})")
        return worst

    def true(self, name, cond, detail=""):
        self.checks += 1
        if not cond:
            self.fail(f"{name}: {detail}")


# ---------------------------------------------------------------------------------------------------------------
# Cases


def agree(ctx, nfail):
    """Sum of the ranks' failure counts, over gloo (so a broken library cannot fake a pass)."""
    t = torch.tensor([nfail], dtype=torch.int64)
    dist.all_reduce(t, group=ctx.cpu_pg)
    return int(t.item())


def write_jsonl(ctx, obj):
    if ctx.rank == 0 and ctx.args.jsonl:
        with open(ctx.args.jsonl, "a") as f:
            f.write(json.dumps(obj) + "\n")


def run_cases(ctx, cases, selected=None):
    """cases: [(name, fn(ctx))]. Prints 'CASE <name> PASS|FAIL <secs>s <detail>' on rank 0 for each, as it goes (a
    run cut by a timeout still shows how far it got). Returns the number of failed cases."""
    failed = 0
    if ctx.args.expect_path or ctx.args.expect_expandable or ctx.args.expect_registered:
        # The setup checks (which library took the communicator, whether expandable segments are on, whether buffer
        # registrations reach the drop-in) as a case.
        mine = list(ctx.chk.failures)
        total = agree(ctx, len(mine))
        failed += total != 0
        regs = ctx.registrations
        if ctx.rank == 0:
            print(f"CASE setup {'PASS' if total == 0 else 'FAIL'} 0.0s path {','.join(ctx.paths) or '?'}, "
                  f"expandable {ctx.expandable}" + (f", registrations {regs['registered']}" if regs else "") +
                  (f"; {mine[0]}" if mine else ""), flush=True)
        ctx.chk.failures = []
    for name, fn in cases:
        if selected and name not in selected:
            continue
        before = len(ctx.chk.failures)
        checks0 = ctx.chk.checks
        ctx.notes = {}
        t0 = time.perf_counter()
        if ctx.rank == 0:
            log(f"case {name}: start")
        try:
            fn(ctx)
            ctx.sync()
        except Exception as e:  # noqa: BLE001 - the case fails, the run goes on to the next case
            ctx.chk.fail(f"{name}: raised {type(e).__name__}: {str(e)[:600]}")
            traceback.print_exc()
        secs = time.perf_counter() - t0
        mine = ctx.chk.failures[before:]
        for m in mine[:10]:
            log(f"MISMATCH {name}: {m}")
        total = agree(ctx, len(mine))
        verdict = "PASS" if total == 0 else "FAIL"
        failed += total != 0
        if ctx.rank == 0:
            detail = f"{ctx.chk.checks - checks0} checks on rank 0, {total} failure(s) over all ranks"
            if ctx.notes:
                detail += "; " + ", ".join(f"{k}={v}" for k, v in ctx.notes.items())
            if mine:
                detail += "; rank 0: " + mine[0][:300]
            print(f"CASE {name} {verdict} {secs:.1f}s {detail}", flush=True)
            write_jsonl(ctx, {"case": name, "verdict": verdict, "secs": round(secs, 3), "tag": ctx.args.tag,
                              "world": ctx.world, "backend": ctx.args.backend, "sim_hosts": ctx.args.sim_hosts,
                              "failures_rank0": mine[:5], "notes": ctx.notes})
    return failed


def finish(ctx, failed, destroy=True):
    """Exit status: 0 only if every case (the setup checks included) passed on every rank."""
    if ctx.rank == 0:
        print(f"RESULT {'OK' if failed == 0 else 'FAILED'}: {failed} case(s) failed", flush=True)
    if destroy:
        dist.barrier(group=ctx.cpu_pg)
        dist.destroy_process_group()
    return 0 if failed == 0 else 1


def parse_cases(text):
    return [c for c in (text or "").split(",") if c]


def base_parser(doc, timeout_s=120):
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return add_args(p, timeout_s)
