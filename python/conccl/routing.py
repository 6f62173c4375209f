"""Which communicators the drop-in runs on conccl, restated for `conccl info`. Pure logic on an environment mapping.

Since commit 670c2ea the shim decides per communicator at init (src/nccl/shim_init.cc): its ranks meet at a
rendezvous and the communicator runs on conccl when they all share a host, on the real NCCL otherwise. The rule below
(src/nccl/routing.cc, decideUniqueId and launchScopeFromEnv) is what the shim falls back to without a usable network
interface, and what decide() evaluates:

The path of a communicator is decided once, by the process that calls ncclGetUniqueId, and every rank follows it:
  - CONCCL_NCCL_SHIM=0 (or a value that is neither 0 nor 1)  -> NCCL (everything forwarded);
  - the job spans nodes (WORLD_SIZE != LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_SIZE != OMPI_COMM_WORLD_LOCAL_SIZE,
    SLURM_NNODES > 1)                                          -> NCCL;
  - otherwise (all ranks on this node)                         -> conccl.
Sub-communicators (ncclCommSplit, torch's new_group) take their parent's path.
"""
from __future__ import annotations

from typing import Mapping, Optional, Tuple

ALL_COLLS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter",
             "send_recv")


def _to_int(text: Optional[str]) -> int:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        return 0


def _differs(env: Mapping[str, str], world: str, local: str) -> Optional[str]:
    w, l = env.get(world), env.get(local)
    if w is None or l is None:
        return None
    wn, ln = _to_int(w), _to_int(l)
    if wn > 0 and ln > 0 and wn != ln:
        return f"{world}={w} != {local}={l}"
    return None


def launch_scope(env: Mapping[str, str]) -> Tuple[str, str]:
    """("multi-node", why) or ("single-node", why), as launchScopeFromEnv reads the launchers' variables."""
    for world, local in (("WORLD_SIZE", "LOCAL_WORLD_SIZE"), ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE")):
        why = _differs(env, world, local)
        if why:
            return "multi-node", why
    if _to_int(env.get("SLURM_NNODES")) > 1:
        return "multi-node", f"SLURM_NNODES={env['SLURM_NNODES']}"
    return "single-node", "no launcher variable says the job spans nodes"


def decide(env: Mapping[str, str]) -> Tuple[str, str]:
    """("conccl" | "NCCL", reason) for the communicators of a job started with environment `env`."""
    shim = env.get("CONCCL_NCCL_SHIM")
    if shim is not None and shim.strip() != "1":
        if shim.strip() == "0":
            return "NCCL", "CONCCL_NCCL_SHIM=0"
        return "NCCL", f"CONCCL_NCCL_SHIM='{shim}' is neither 0 nor 1 (the shim turns itself off)"
    scope, why = launch_scope(env)
    if scope == "multi-node":
        return "NCCL", f"the job spans nodes ({why})"
    return "conccl", "all ranks on this node"


def collectives(env: Mapping[str, str]) -> str:
    """What CONCCL_NCCL_COLLS lets conccl communicators run (a collective left out fails, it is not forwarded)."""
    value = env.get("CONCCL_NCCL_COLLS", "all").strip()
    return "all" if value in ("", "all") else value
