"""The `conccl` command: `conccl run <command...>` and `conccl info`."""
from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="conccl", description="conccl for PyTorch: run NCCL programs on conccl "
                                "(copy-engine collectives) through its NCCL drop-in. docs/pytorch.md")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a command with the drop-in preloaded (e.g. conccl run torchrun "
                       "--nproc-per-node 8 train.py)",
                       description="Prepends the packaged libconccl_nccl.so to LD_PRELOAD, points it at the NCCL "
                       "torch loads (CONCCL_NCCL_REAL_LIB), checks that the two NCCL versions have the same "
                       "major.minor, then execs the command. Exit status 2 with a one-line reason when it refuses.")
    r.add_argument("--no-abi-check", dest="abi_check", action="store_false",
                   help="skip the NCCL version check (and CONCCL_NCCL_REAL_LIB's default)")
    r.add_argument("--python", help="the interpreter whose torch the command uses (default: the command's own: "
                   "python..., or the shebang of a script such as torchrun; else this one)")
    r.add_argument("--dry-run", action="store_true", help="print the changed variables and the command; run nothing")
    r.add_argument("command", nargs=argparse.REMAINDER, help="the command and its arguments")
    i = sub.add_parser("info", help="GPUs, peer access, copy engines, NCCL / driver versions, routing")
    i.add_argument("--json", action="store_true", help="one JSON object instead of text")
    i.add_argument("--no-torch", dest="torch", action="store_false", help="do not probe torch's NCCL")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "run":
        from .launcher import run

        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return run(command, check_abi_flag=args.abi_check, python=args.python, dry_run=args.dry_run)
    from .info import collect, render

    report = collect(probe_torch=args.torch)
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print("\n".join(render(report)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
