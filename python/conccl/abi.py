"""The NCCL ABI check of `conccl run`: the drop-in exports one NCCL version's API (the nccl.h it was built against)
and forwards what it cannot run to the real NCCL, so the NCCL that torch was built for and loads must have the same
major.minor. Pure logic: no ctypes, no torch (the probes that read the versions are in launcher.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

Version = Tuple[int, int, int]
VersionLike = Union[int, str, Sequence[int]]


def parse_nccl_version(value: VersionLike) -> Version:
    """(major, minor, patch) from NCCL_VERSION_CODE (22809; before 2.9 the code was major*1000 + minor*100 + patch,
    e.g. 2708), from torch.cuda.nccl.version() ((2, 28, 9), or an int in old torch) or from "2.28.9"."""
    if isinstance(value, bool):
        raise ValueError(f"not an NCCL version: {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"not an NCCL version code: {value}")
        if value >= 10000:  # NCCL >= 2.9: major*10000 + minor*100 + patch
            return value // 10000, (value // 100) % 100, value % 100
        return value // 1000, (value // 100) % 10, value % 100  # NCCL < 2.9
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\.(\d+)(?:\.(\d+))?\S*\s*", value)
        if m:
            return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)
        if value.strip().isdigit():
            return parse_nccl_version(int(value.strip()))
        raise ValueError(f"not an NCCL version: {value!r}")
    parts = [int(p) for p in value]
    if not 2 <= len(parts) <= 3:
        raise ValueError(f"not an NCCL version: {value!r}")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else 0


def format_version(v: Version) -> str:
    return f"{v[0]}.{v[1]}.{v[2]}"


@dataclass(frozen=True)
class AbiCheck:
    ok: bool
    reason: str  # one line: why it matches or not


def check_abi(shim_version: Optional[VersionLike], torch_nccl: Optional[VersionLike],
              torch_nccl_source: str = "torch") -> AbiCheck:
    """Whether the drop-in built against `shim_version` can stand in for `torch_nccl`.

    Rule: same major and minor. NCCL keeps its API and ABI within a minor release (the patch releases of 2.28 share
    nccl.h's signatures and enums), while a new minor adds functions and enum values: a torch built for 2.29 may call
    a 2.29 function the 2.28 shim does not export (the call would reach the real NCCL with the shim's handle), and a
    2.27 NCCL under the shim would lack functions the shim forwards to.
    Unknown versions are refused: the check exists to stop a silent mismatch.
    """
    if shim_version is None:
        return AbiCheck(False, "the drop-in does not report the NCCL version it was built against "
                               "(no concclNcclShimAbiVersion: a drop-in older than this package?)")
    if torch_nccl is None:
        return AbiCheck(False, "could not find the NCCL version torch loads (no nvidia-nccl wheel, and "
                               "torch.cuda.nccl.version() failed); use --no-abi-check to run anyway")
    try:
        shim_v = parse_nccl_version(shim_version)
    except ValueError as e:
        return AbiCheck(False, f"drop-in: {e}")
    try:
        torch_v = parse_nccl_version(torch_nccl)
    except ValueError as e:
        return AbiCheck(False, f"{torch_nccl_source}: {e}")
    if shim_v[:2] != torch_v[:2]:
        return AbiCheck(False, f"NCCL ABI mismatch: the conccl drop-in implements NCCL {format_version(shim_v)}'s API, "
                               f"{torch_nccl_source} loads NCCL {format_version(torch_v)} (major.minor must match)")
    return AbiCheck(True, f"NCCL ABI matches: drop-in {format_version(shim_v)}, {torch_nccl_source} "
                          f"{format_version(torch_v)}")
