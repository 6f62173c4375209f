"""`conccl run <command...>`: the environment that puts a command's NCCL calls on conccl, the ABI check, the exec.

build_env() and the command/interpreter logic are pure (tested on the CPU); the probes load libraries or start a
subprocess. None of this initialises CUDA.
"""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

SHIM_BASENAME = "libconccl_nccl.so"


def split_preload(value: str) -> List[str]:
    """LD_PRELOAD's entries: ld.so separates them by spaces or colons."""
    return [p for p in re.split(r"[:\s]+", value or "") if p]


def compose_preload(shim: str, existing: Optional[str]) -> str:
    """The shim first, then the caller's own preloads in their order. Any other copy of the drop-in is dropped: two
    shims would each intercept NCCL and wrap each other's communicators."""
    rest = [p for p in split_preload(existing or "") if Path(p).name != SHIM_BASENAME and p != shim]
    return ":".join([shim, *rest])


@dataclass
class LaunchEnv:
    env: Dict[str, str]
    notes: List[str] = field(default_factory=list)  # warnings for stderr (one line each)


def build_env(base: Mapping[str, str], shim: str, real_nccl: Optional[str] = None) -> LaunchEnv:
    """The command's environment: `base` plus
      LD_PRELOAD            the drop-in first (prepended to the caller's LD_PRELOAD);
      CONCCL_NCCL_REAL_LIB  the NCCL torch loads, where the drop-in forwards what conccl does not run (only when the
                            caller did not set it: their choice wins);
    and warnings for settings that make conccl communicators fail (not refused: they may be intended)."""
    env = dict(base)
    out = LaunchEnv(env)
    env["LD_PRELOAD"] = compose_preload(shim, base.get("LD_PRELOAD"))
    if real_nccl and not base.get("CONCCL_NCCL_REAL_LIB"):
        env["CONCCL_NCCL_REAL_LIB"] = real_nccl
    # PyTorch's expandable segments need no warning: conccl exports their pieces to the peers (docs/multiprocess.md,
    # "Buffers"). Its cudaMallocAsync backend's memory cannot be mapped by a peer, so calls on it are staged (small) or
    # run on bounce regions (copied in and out, memory held): a note names the allocator setting that moves directly.
    alloc_conf = ",".join(base.get(v, "") for v in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"))
    if "cudamallocasync" in alloc_conf.replace(" ", "").lower():
        out.notes.append("PyTorch's cudaMallocAsync backend: no peer process can map its memory, so conccl stages "
                         "small calls on it through scratch and runs larger ones on bounce buffers (a same-device "
                         "copy in and out, and up to CONCCL_POOL_BOUNCE_MAX_BYTES of device memory per buffer held "
                         "by each communicator); expandable_segments:True moves directly (docs/multiprocess.md, "
                         "\"Buffers\")")
    shim_switch = base.get("CONCCL_NCCL_SHIM")
    if shim_switch is not None and shim_switch.strip() != "1":
        out.notes.append(f"CONCCL_NCCL_SHIM={shim_switch}: every communicator goes to the real NCCL")
    return out


def interpreter_of(command: Sequence[str], which=shutil.which, read_first_line=None) -> Optional[str]:
    """The Python interpreter a command will run (whose torch, and so whose NCCL, it loads):
    `python...` itself, or the interpreter in the shebang of a script such as torchrun; None if not Python."""
    if not command:
        return None
    exe = which(command[0]) or command[0]
    if re.fullmatch(r"python[0-9.]*", Path(command[0]).name):
        return exe
    if read_first_line is None:
        def read_first_line(path):
            try:
                with open(path, "rb") as f:
                    return f.readline(512).decode("utf-8", "replace")
            except OSError:
                return ""
    line = read_first_line(exe).strip()
    if not line.startswith("#!"):
        return None
    parts = line[2:].split()
    if not parts:
        return None
    if Path(parts[0]).name == "env":  # #!/usr/bin/env [-S] python3 [args]
        parts = [p for p in parts[1:] if not p.startswith("-")]
        if not parts:
            return None
        found = which(parts[0])
        return found if found and "python" in Path(parts[0]).name else None
    return parts[0] if "python" in Path(parts[0]).name else None


# Run by the command's interpreter, without LD_PRELOAD: the NCCL that torch loads, without initialising CUDA.
# 1. torch's pip wheels depend on nvidia-nccl-cu*, whose libnccl.so.2 torch loads (RPATH): open that file and ask it;
# 2. otherwise torch.cuda.nccl.version() (the NCCL linked into torch; it asks ncclGetVersion, no CUDA context).
NCCL_PROBE = r"""
import ctypes, importlib.util, json, os, sys
out = {}
try:
    spec = importlib.util.find_spec("nvidia.nccl")
    for base in (list(spec.submodule_search_locations or []) if spec else []):
        path = os.path.join(base, "lib", "libnccl.so.2")
        if os.path.isfile(path):
            v = ctypes.c_int(0)
            if ctypes.CDLL(path).ncclGetVersion(ctypes.byref(v)) == 0:
                out = {"version": v.value, "path": os.path.realpath(path), "source": "the nvidia-nccl wheel torch loads"}
                break
except Exception as e:
    out["wheel_error"] = str(e)
if "version" not in out:
    try:
        import torch
        v = torch.cuda.nccl.version()
        out.update(version=list(v) if isinstance(v, tuple) else v, source="torch.cuda.nccl.version()")
    except Exception as e:
        out["torch_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def probe_torch_nccl(python: str, base_env: Mapping[str, str], timeout_s: float = 120.0) -> Dict:
    """{"version", "path"?, "source"} of the NCCL `python`'s torch loads, or {"error": ...}."""
    env = {k: v for k, v in base_env.items() if k != "LD_PRELOAD"}
    try:
        r = subprocess.run([python, "-c", NCCL_PROBE], env=env, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{python}: {e}"}
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"{python} -c <probe> exited {r.returncode}: {r.stderr.strip()[-300:]}"}
    if "version" not in out:
        out["error"] = out.get("torch_error") or out.get("wheel_error") or "no NCCL found"
    return out


def shim_abi_version(shim: str) -> Optional[int]:
    """NCCL_VERSION_CODE the drop-in was built against (concclNcclShimAbiVersion), or None for a drop-in without it.
    Loading the drop-in runs no CUDA call (its CUDA runtime is static and starts on first use)."""
    try:
        lib = ctypes.CDLL(shim)
        fn = lib.concclNcclShimAbiVersion
    except (OSError, AttributeError):
        return None
    fn.restype, fn.argtypes = ctypes.c_int, []
    return int(fn())


def run(command: Sequence[str], *, check_abi_flag: bool = True, python: Optional[str] = None,
        dry_run: bool = False, environ: Optional[Mapping[str, str]] = None, stderr=sys.stderr) -> int:
    """`conccl run`: exits with a one-line reason (status 2) when it cannot run the command on conccl, else execs it
    (dry_run: prints the environment changes and the command instead)."""
    from . import abi
    from ._libs import ENV_LIB_DIR, find_library, lib_dir

    environ = dict(os.environ if environ is None else environ)
    if not command:
        print("conccl run: no command given (usage: conccl run <command...>)", file=stderr)
        return 2
    shim = find_library("nccl_shim", environ)
    if shim is None:
        print(f"conccl run: no {SHIM_BASENAME} in {lib_dir(environ)} (the package was built without CUDA and nccl.h "
              f"2.28, or {ENV_LIB_DIR} points elsewhere)", file=stderr)
        return 2
    real = None
    if check_abi_flag:
        py = python or interpreter_of(command) or sys.executable
        probe = probe_torch_nccl(py, environ)
        source = f"torch of {py} ({probe.get('source', 'no NCCL found')})"
        result = abi.check_abi(shim_abi_version(str(shim)), probe.get("version"), source)
        if not result.ok:
            detail = f": {probe['error']}" if probe.get("error") and probe.get("version") is None else ""
            print(f"conccl run: refusing to start: {result.reason}{detail}", file=stderr)
            return 2
        real = probe.get("path")
        if environ.get("CONCCL_DEBUG", environ.get("NCCL_DEBUG", "")).upper() in ("INFO", "TRACE"):
            print(f"conccl run: {result.reason}", file=stderr)
    launch = build_env(environ, str(shim), real)
    for note in launch.notes:
        print(f"conccl run: warning: {note}", file=stderr)
    if dry_run:
        for key in sorted(launch.env):
            if launch.env[key] != environ.get(key):
                print(f"{key}={launch.env[key]}")
        print(" ".join(command))
        return 0
    exe = shutil.which(command[0], path=launch.env.get("PATH")) or command[0]
    try:
        os.execvpe(exe, list(command), launch.env)
    except OSError as e:
        print(f"conccl run: cannot execute {command[0]}: {e}", file=stderr)
        return 127
    return 0  # not reached
