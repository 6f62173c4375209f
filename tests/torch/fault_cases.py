"""Fault cases (issue 24 item 6, case 6), one mode per run; tests/torch/run_all.sh runs them and then the verdict.

  --mode kill --where host|gpu
      A few steps of all-reduces, then rank --victim (1; a comma-separated list kills several, and --victim-node K
      with --sim-nodes G every rank of simulated node K: a node that dies) SIGKILLs itself (os.kill(os.getpid(), 9))
      after writing the kill time (kill-rank<r>.json; the verdict measures from the first kill). The other ranks are then waiting for it: `host`: inside a 64 MiB all_reduce (above the staged
      threshold: the call waits on the host for the peer, or with late calls staged in the synchronize() after
      it); `gpu`: in torch.cuda.synchronize() after a 1 MiB
      all_reduce (staged: the call returned, the GPU waits for the peer), repeated until something raises. Each
      survivor writes when its PyTorch raised. Survivors ignore SIGTERM, so torchrun's own clean-up of the job
      (it SIGTERMs the other workers once one died) does not pass for the library's reaction. A detached watcher
      process per rank writes the time its rank's process ended (pidfd), for survivors that PyTorch's watchdog tore
      down before Python saw an exception.
  --mode abort --where host|gpu --abort-api c10d|pg|backend|auto
      Rank 0 blocks (host: a 64 MiB all_reduce its peers do not make yet; gpu: synchronize() after a 1 MiB one) and
      another thread aborts the process group after 1 s: torch.distributed.distributed_c10d._abort_process_group()
      (c10d), ProcessGroup.abort() (pg) or the NCCL backend's abort() (backend); auto = the first this torch has.
      The blocked call must raise (or, gpu, return) and the process exit 0. Where the 64 MiB call did not block on
      the host (conccl stages late calls and returns), the synchronize() after it is the blocked call, as for gpu. The other ranks make the same call 3 s
      in (after rank 0 aborted): it must raise, not hang; then they abort their own group and exit 0.
  --mode intruder-job
      A plain job (lazy communicators; ranks > 0 wait --stagger-s before their first collective, so the bootstrap
      socket stays open long enough for bootstrap_intruder.py to race the real ranks), checked on seeded data.
  --verdict kill|abort --result-dir D
      Reads the ranks' files and prints one CASE line; for kill also checks that no process of the job is left, no
      new /dev/shm/conccl-* entry (against --shm-before) and no process of the job on nvidia-smi's compute-apps list.
      Exit 0 on PASS.
"""
import argparse
import datetime
import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


# ---------------------------------------------------------------------------------------------------------------
# The watcher: a detached process that records when another process ended.


def watch(pid, out):
    t = None
    try:
        fd = os.pidfd_open(pid)
        import select
        select.select([fd], [], [], 600)
        t = time.time()
    except (OSError, AttributeError):
        while True:  # no pidfd: poll
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                t = time.time()
                break
            time.sleep(0.002)
    write_json(out, {"pid": pid, "t_end": t})


def start_watcher(result_dir, rank):
    out = os.path.join(result_dir, f"end-rank{rank}.json")
    subprocess.Popen([sys.executable, os.path.abspath(__file__), "--watch-pid", str(os.getpid()), "--watch-out", out],
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, close_fds=True)


# ---------------------------------------------------------------------------------------------------------------


def abort_apis(dist, device):
    apis = {}
    c10d = dist.distributed_c10d
    if hasattr(c10d, "_abort_process_group"):
        apis["c10d"] = lambda: c10d._abort_process_group()
    pg = dist.group.WORLD
    if hasattr(pg, "abort"):
        apis["pg"] = lambda: pg.abort()
    try:
        be = pg._get_backend(device)
        if hasattr(be, "abort"):
            apis["backend"] = lambda: be.abort()
    except Exception:  # noqa: BLE001 - that variant is just absent
        pass
    return apis


def quiet_exit(code=0):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def victim_ranks(args, world):
    """The ranks that kill themselves: --victim's list, or every rank of --victim-node under --sim-nodes."""
    if args.victim_node is not None:
        g = args.sim_nodes
        if not g or not 0 <= args.victim_node < world // g:
            raise SystemExit(f"--victim-node {args.victim_node} needs --sim-nodes G with a node of that index")
        return set(range(args.victim_node * g, (args.victim_node + 1) * g))
    ranks = {int(v) for v in args.victim.split(",") if v}
    if not ranks or any(not 0 <= r < world for r in ranks) or len(ranks) >= world:
        raise SystemExit(f"--victim {args.victim}: ranks of 0..{world - 1}, at least one rank left alive")
    return ranks


def mode_kill(args, ctx, torch, dist):
    rank, dev = ctx.rank, ctx.device
    rd = args.result_dir
    write_json(os.path.join(rd, f"pid-rank{rank}.json"), {"pid": os.getpid(), "rank": rank})
    start_watcher(rd, rank)
    victims = victim_ranks(args, ctx.world)
    if rank not in victims:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # see the docstring: torchrun's clean-up is not the library's
    small = torch.ones(MIB // 4, device=dev)
    big = torch.ones(64 * MIB // 4, device=dev)
    for _ in range(args.steps):  # "training": every rank, both sizes, results checked
        small.fill_(1.0)
        big.fill_(1.0)
        dist.all_reduce(small)
        dist.all_reduce(big)
        ctx.sync()
        if float(small[0]) != ctx.world or float(big[-1]) != ctx.world:
            raise SystemExit("wrong all_reduce result before the kill")
    dist.barrier(group=ctx.cpu_pg)
    if rank in victims:
        time.sleep(args.delay_s)  # the others are inside their calls by now
        write_json(os.path.join(rd, f"kill-rank{rank}.json"), {"t_kill": time.time(), "rank": rank,
                                                               "pid": os.getpid()})
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # not reached
    t_start = time.time()
    calls, where, exc = 0, None, None
    deadline = t_start + args.survive_s
    try:
        while time.time() < deadline:
            if args.where == "host":
                where = "all_reduce 64 MiB"
                dist.all_reduce(big)
                calls += 1
                where = "synchronize after all_reduce 64 MiB"
                ctx.sync()
            else:
                where = "all_reduce 1 MiB"
                dist.all_reduce(small)
                calls += 1
                where = "synchronize after all_reduce 1 MiB"
                ctx.sync()
    except BaseException as e:  # noqa: BLE001 - what we are waiting for
        exc = e
    t_exc = time.time()
    rec = {"rank": rank, "where": args.where, "t_start": t_start, "calls": calls, "raised_in": where,
           "t_exc": t_exc if exc is not None else None,
           "exc": f"{type(exc).__name__}: {str(exc)[:500]}" if exc is not None else None}
    write_json(os.path.join(rd, f"exc-rank{rank}.json"), rec)
    print(f"[rank {rank}] {'raised' if exc else 'no exception'} in {where} after {calls} call(s): "
          f"{rec['exc']}", flush=True)
    # Clean up as a program would after a failure: abort the group (bounded), then leave.
    done = threading.Event()

    def do_abort():
        try:
            apis = abort_apis(dist, dev)
            if apis:
                next(iter(apis.values()))()
        except Exception as e:  # noqa: BLE001
            print(f"[rank {rank}] abort after the failure raised {type(e).__name__}: {e}", flush=True)
        done.set()
    threading.Thread(target=do_abort, daemon=True).start()
    aborted = done.wait(10)
    rec["abort_s"] = round(time.time() - t_exc, 3) if aborted else None
    write_json(os.path.join(rd, f"exc-rank{rank}.json"), rec)
    quiet_exit(0)


def mode_abort(args, ctx, torch, dist):
    rank, dev = ctx.rank, ctx.device
    rd = args.result_dir
    apis = abort_apis(dist, dev)
    api = args.abort_api
    if api == "auto":
        api = next(iter(apis), None)
    rec = {"rank": rank, "where": args.where, "apis_present": sorted(apis), "api": api,
           "torch": torch.__version__}
    if api not in apis:
        rec["error"] = f"abort API {args.abort_api!r} not in this torch (present: {sorted(apis)})"
        write_json(os.path.join(rd, f"abort-rank{rank}.json"), rec)
        print(f"[rank {rank}] {rec['error']}", flush=True)
        dist.barrier(group=ctx.cpu_pg)
        quiet_exit(3)
    small = torch.ones(MIB // 4, device=dev)
    big = torch.ones(64 * MIB // 4, device=dev)
    dist.all_reduce(small)
    dist.all_reduce(big)
    ctx.sync()
    dist.barrier(group=ctx.cpu_pg)
    t0 = time.time()
    t_abort = {}

    def aborter():
        time.sleep(args.abort_after_s)
        t_abort["t"] = time.time()
        try:
            apis[api]()
            t_abort["returned"] = time.time()
        except Exception as e:  # noqa: BLE001
            t_abort["error"] = f"{type(e).__name__}: {e}"

    exc, unblocked, calls = None, None, 0
    if rank == 0:
        th = threading.Thread(target=aborter, daemon=True)
        th.start()
        try:
            if args.where == "host":
                dist.all_reduce(big)  # the peers make it only after the abort
                calls += 1
                # With late calls staged (conccl's default) the call returned at once and the GPU waits instead.
                rec["t_call_returned"] = time.time()
                ctx.sync()
            else:
                dist.all_reduce(small)
                calls += 1
                ctx.sync()  # blocked on the GPU until the abort opens the waits
            unblocked = time.time()
            for _ in range(3):  # the group is aborted now: the next call must raise
                dist.all_reduce(small)
                calls += 1
                ctx.sync()
        except BaseException as e:  # noqa: BLE001
            exc = e
        th.join(10)
        rec.update({"t_abort": t_abort.get("t"), "abort_returned": t_abort.get("returned"),
                    "abort_error": t_abort.get("error")})
    else:
        time.sleep(args.abort_after_s + 2.0)
        rec["t_call"] = time.time()
        try:
            for _ in range(4):
                dist.all_reduce(big if args.where == "host" else small)
                calls += 1
                ctx.sync()
        except BaseException as e:  # noqa: BLE001
            exc = e
    t_end = time.time()
    rec.update({"t0": t0, "t_exc": t_end if exc is not None else None, "t_unblocked": unblocked, "calls": calls,
                "exc": f"{type(exc).__name__}: {str(exc)[:500]}" if exc is not None else None})
    if rank != 0:
        try:
            apis[api]()
        except Exception as e:  # noqa: BLE001
            rec["own_abort_error"] = f"{type(e).__name__}: {e}"
    rec["exit"] = "clean"
    write_json(os.path.join(rd, f"abort-rank{rank}.json"), rec)
    print(f"[rank {rank}] abort case: {rec}", flush=True)
    sys.stdout.flush()
    return 0  # a normal interpreter exit: the clean exit is part of the test


def mode_intruder_job(args, ctx, torch, dist):
    import tcommon
    from tcommon import gen

    def job(c):
        rank, world, dev = c.rank, c.world, c.device
        if rank != 0:
            time.sleep(args.stagger_s)  # rank 0's bootstrap socket waits for us meanwhile
        for n in (MIB // 4, 16 * MIB // 4):
            t = gen(("intr", rank, n), n, torch.float32, dev)
            dist.all_reduce(t)
            x64 = torch.stack([gen(("intr", r, n), n, torch.float32, dev).double() for r in range(world)])
            c.chk.sum_close(f"all_reduce n={n}", t, x64.sum(0), x64.abs().sum(0), world, torch.float32)
        m = 4099
        out = torch.empty(m * world, device=dev)
        dist.all_gather_into_tensor(out, gen(("intr-ag", rank), m, torch.float32, dev))
        c.chk.exact("all_gather", out, torch.cat([gen(("intr-ag", r), m, torch.float32, dev) for r in range(world)]))
        g = dist.new_group([0, 1])  # another communicator, another bootstrap to race
        if rank in (0, 1):
            if rank == 1:
                time.sleep(args.stagger_s)
            t = gen(("intr-g", rank), m, torch.float32, dev)
            dist.all_reduce(t, group=g)
            x64 = torch.stack([gen(("intr-g", r), m, torch.float32, dev).double() for r in (0, 1)])
            c.chk.sum_close("new_group([0,1]) all_reduce", t, x64.sum(0), x64.abs().sum(0), 2, torch.float32)
        c.sync()

    failed = tcommon.run_cases(ctx, [("intruder_job", job)])
    return tcommon.finish(ctx, failed)


# ---------------------------------------------------------------------------------------------------------------
# Verdicts (no torch needed)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not left running
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def gpu_pids():
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    pids = {}
    for line in out.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if parts and parts[0].isdigit():
            pids[int(parts[0])] = parts[1] if len(parts) > 1 else "?"
    return pids


def verdict_leftovers(args, pids, problems, notes):
    deadline = time.time() + args.settle_s
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    if left:
        problems.append(f"processes of the job still running: {left}")
    before = set()
    if args.shm_before and os.path.exists(args.shm_before):
        with open(args.shm_before) as f:
            before = {ln.strip() for ln in f if ln.strip()}
    shm = sorted(set(glob.glob("/dev/shm/conccl-*")) - before)
    if shm:
        problems.append(f"left in /dev/shm: {shm[:5]}")
    g = None
    while True:
        g = gpu_pids()
        held = sorted(set(pids) & set(g or {}))
        if not held or time.time() >= deadline:
            break
        time.sleep(0.2)
    if g is None:
        notes.append("nvidia-smi not available: GPU memory not checked")
    elif held:
        problems.append(f"processes of the job still hold GPU memory: {[(p, g[p]) for p in held]}")


def verdict_kill(args):
    rd = args.result_dir
    problems, notes = [], []
    kills = [k for k in (read_json(p) for p in sorted(glob.glob(os.path.join(rd, "kill-rank*.json")))) if k]
    # A node that dies: its ranks die within a few ms of each other; the survivors' time counts from the first.
    kill = min(kills, key=lambda k: k["t_kill"]) if kills else None
    killed = {k["rank"] for k in kills}
    if args.victims and kills and killed != set(args.victims):
        problems.append(f"victims {sorted(args.victims)} expected, kill files from {sorted(killed)}")
    pids = [r["pid"] for r in (read_json(p) for p in glob.glob(os.path.join(rd, "pid-rank*.json"))) if r]
    if not kill:
        problems.append("no victim wrote kill-rank<r>.json (the job failed before the kill)")
    elif len(kills) > 1:
        notes.append(f"ranks {sorted(killed)} killed within "
                     f"{(max(k['t_kill'] for k in kills) - kill['t_kill']) * 1e3:.0f} ms")
    lat = []
    for r in range(args.world):
        if r in killed:
            continue
        exc = read_json(os.path.join(rd, f"exc-rank{r}.json"))
        end = read_json(os.path.join(rd, f"end-rank{r}.json"))
        if not kill:
            continue
        if exc and exc.get("t_exc"):
            ms = (exc["t_exc"] - kill["t_kill"]) * 1e3
            lat.append(ms)
            notes.append(f"rank {r} raised after {ms:.0f} ms in {exc.get('raised_in')} "
                         f"({(exc.get('exc') or '')[:120]})")
        elif end and end.get("t_end"):
            ms = (end["t_end"] - kill["t_kill"]) * 1e3
            lat.append(ms)
            notes.append(f"rank {r}: no Python exception recorded; the process ended {ms:.0f} ms after the kill "
                         f"(torn down by PyTorch's watchdog or killed)")
            if args.require_exception:
                problems.append(f"rank {r} never raised in Python")
        else:
            problems.append(f"rank {r}: neither an exception nor the end of its process was recorded"
                            + (f" ({exc})" if exc else ""))
            continue
        if ms > args.max_ms:
            problems.append(f"rank {r} took {ms:.0f} ms (> {args.max_ms:.0f} ms) to fail after the kill")
    verdict_leftovers(args, pids, problems, notes)
    name = args.name or f"kill_{args.where}"
    detail = (f"max {max(lat):.0f} ms after the kill; " if lat else "") + "; ".join(problems + notes)
    print(f"CASE {name} {'PASS' if not problems else 'FAIL'} {detail}", flush=True)
    return 0 if not problems else 1


def verdict_abort(args):
    rd = args.result_dir
    problems, notes = [], []
    recs = {r: read_json(os.path.join(rd, f"abort-rank{r}.json")) for r in range(args.world)}
    r0 = recs.get(0)
    if r0 and r0.get("apis_present") is not None:
        notes.append(f"abort APIs in torch {r0.get('torch')}: {r0['apis_present']}, used {r0.get('api')}")
    for r, rec in recs.items():
        if not rec:
            problems.append(f"rank {r} wrote no result (crashed or hung)")
            continue
        if rec.get("error"):
            problems.append(f"rank {r}: {rec['error']}")
            continue
        if rec.get("exit") != "clean":
            problems.append(f"rank {r} did not reach its clean exit")
        if r == 0:
            if rec.get("abort_error"):
                problems.append(f"rank 0's abort raised: {rec['abort_error']}")
            ta = rec.get("t_abort")
            te = rec.get("t_unblocked") or rec.get("t_exc")
            if ta is None:
                problems.append("rank 0 never aborted")
            elif te is None:
                problems.append("rank 0's blocked call neither returned nor raised")
            else:
                ms = (te - ta) * 1e3
                how = "returned" if rec.get("t_unblocked") and (not rec.get("t_exc") or
                                                                 rec["t_unblocked"] < rec["t_exc"]) else "raised"
                notes.append(f"rank 0's blocked call {how} {ms:.0f} ms after the abort")
                if ms > args.max_ms:
                    problems.append(f"rank 0's blocked call took {ms:.0f} ms (> {args.max_ms:.0f}) to end after the "
                                    "abort")
                returned_first = rec.get("t_call_returned") is not None and rec["t_call_returned"] < ta
                if args.where == "host" and how != "raised":
                    if returned_first:
                        notes.append("the 64 MiB call returned before the abort (it did not wait on the host for "
                                     "its peers): the GPU wait after it ended instead")
                    else:
                        problems.append("rank 0's blocked call returned normally after the abort (it must raise)")
            if not rec.get("exc"):
                problems.append("rank 0: no call raised after the abort")
        else:
            if not rec.get("exc"):
                problems.append(f"rank {r}: its call after rank 0's abort did not raise")
            elif rec.get("t_call"):
                ms = (rec["t_exc"] - rec["t_call"]) * 1e3
                notes.append(f"rank {r} raised {ms:.0f} ms into its call ({rec['exc'][:100]})")
                if ms > args.peer_max_ms:
                    problems.append(f"rank {r} took {ms:.0f} ms (> {args.peer_max_ms:.0f}) to raise")
    if args.job_rc is not None and args.job_rc != 0:
        problems.append(f"the job exited {args.job_rc} (every rank must exit 0)")
    name = args.name or f"abort_{args.where}"
    print(f"CASE {name} {'PASS' if not problems else 'FAIL'} " + "; ".join(problems + notes), flush=True)
    return 0 if not problems else 1


# ---------------------------------------------------------------------------------------------------------------


def main():
    if "--watch-pid" in sys.argv:
        p = argparse.ArgumentParser()
        p.add_argument("--watch-pid", type=int, required=True)
        p.add_argument("--watch-out", required=True)
        a = p.parse_args()
        watch(a.watch_pid, a.watch_out)
        return 0
    if "--verdict" in sys.argv:
        p = argparse.ArgumentParser()
        p.add_argument("--verdict", choices=["kill", "abort"], required=True)
        p.add_argument("--result-dir", required=True)
        p.add_argument("--world", type=int, required=True)
        p.add_argument("--where", default="host")
        p.add_argument("--name")
        p.add_argument("--max-ms", type=float, default=1000.0)
        p.add_argument("--peer-max-ms", type=float, default=2000.0)
        p.add_argument("--settle-s", type=float, default=10.0, help="how long processes get to go away")
        p.add_argument("--shm-before", help="file listing /dev/shm/conccl-* before the job")
        p.add_argument("--require-exception", action="store_true")
        p.add_argument("--victims", type=lambda v: [int(x) for x in v.split(",") if x],
                       help="the ranks that were to die (checked against the kill files)")
        p.add_argument("--job-rc", type=int)
        a = p.parse_args()
        return verdict_kill(a) if a.verdict == "kill" else verdict_abort(a)

    sys.path.insert(0, HERE)
    import tcommon
    p = tcommon.base_parser(__doc__, timeout_s=30)
    p.add_argument("--mode", choices=["kill", "abort", "intruder-job"], required=True)
    p.add_argument("--where", choices=["host", "gpu"], default="host")
    p.add_argument("--victim", default="1", help="rank(s) that kill themselves, comma-separated")
    p.add_argument("--victim-node", type=int, help="with --sim-nodes G: every rank of simulated node K is a victim")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--delay-s", type=float, default=0.5, help="victim: sleep after the barrier before the kill")
    p.add_argument("--survive-s", type=float, default=20.0, help="survivors give up waiting for an error after it")
    p.add_argument("--abort-api", default="auto", choices=["auto", "c10d", "pg", "backend"])
    p.add_argument("--abort-after-s", type=float, default=1.0)
    p.add_argument("--stagger-s", type=float, default=2.0)
    p.add_argument("--result-dir", default=".")
    args = p.parse_args()
    os.makedirs(args.result_dir, exist_ok=True)
    import torch
    import torch.distributed as dist
    ctx = tcommon.setup(args, init_probe=args.mode != "intruder-job")
    if args.mode == "kill":
        return mode_kill(args, ctx, torch, dist)
    if args.mode == "abort":
        return mode_abort(args, ctx, torch, dist)
    return mode_intruder_job(args, ctx, torch, dist)


if __name__ == "__main__":
    sys.exit(main())
