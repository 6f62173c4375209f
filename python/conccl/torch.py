"""conccl's fused GEMM + collective ops as PyTorch custom ops, on the conccl communicator behind a process group.

    C, A_full = ...                                   # shapes (W = the group's size, row-major, bf16 or fp16):
    a_full, c = conccl.torch.all_gather_matmul(a_shard, b, group)      # a_shard [m, k], b [k, n] -> [W*m, k], [W*m, n]
    c = conccl.torch.matmul_reduce_scatter(a, b, group)                # a [W*m, k], b [k, n]    -> [m, n] (summed)

`torch.ops.conccl.all_gather_matmul` / `torch.ops.conccl.matmul_reduce_scatter` are registered with torch.library
(opaque to torch.compile, with fake implementations for tracing). They run on the group's NCCL communicator, which
must be one the conccl drop-in made: start the program with `conccl run` (LD_PRELOAD of libconccl_nccl.so), and the
communicator on conccl (all ranks on one node). The first call on a group whose NCCL communicator does not exist
yet creates it with a one-element all-reduce (every rank calls the op, so that is collective too).

Under torch.compile, call torch.ops.conccl.<op>(..., group.group_name) with the name computed outside the compiled
function (dynamo may not trace ProcessGroup attributes). torch.library infers the schemas from the annotations, so
this module must not use `from __future__ import annotations`.

Call conccl.torch.release(group) before destroy_process_group(group): the ops library keeps a GEMM stream, events
and a cuBLASLt workspace per communicator. No autograd formula is registered (forward only).
"""
import ctypes
from typing import Dict, Optional, Tuple

import torch
import torch.distributed as dist

from ._libs import find_library, lib_dir

__all__ = ["all_gather_matmul", "matmul_reduce_scatter", "conccl_comm", "release"]

_CONCCL_TYPES = {torch.bfloat16: 7, torch.float16: 6}  # concclBfloat16, concclFloat16 (include/conccl/conccl.h)
_I64, _VP = ctypes.c_int64, ctypes.c_void_p


class _Native:
    """libconccl_ops.so and the drop-in's concclNcclShimGetComm, loaded once."""

    def __init__(self):
        process = ctypes.CDLL(None)  # the global scope: the preloaded drop-in's symbols are there
        try:
            self.get_comm = process.concclNcclShimGetComm
        except AttributeError:
            raise RuntimeError("conccl.torch needs the conccl NCCL drop-in in this process: start the program with "
                               "`conccl run ...` (LD_PRELOAD of libconccl_nccl.so)") from None
        self.get_comm.argtypes, self.get_comm.restype = [_VP, ctypes.POINTER(_VP)], ctypes.c_int
        self.nccl_last_error = process.ncclGetLastError
        self.nccl_last_error.argtypes, self.nccl_last_error.restype = [_VP], ctypes.c_char_p
        path = find_library("ops")
        if path is None:
            raise RuntimeError(f"no libconccl_ops.so in {lib_dir()} (built with CUDA and cuBLASLt only)")
        # Its conccl* references bind to the preloaded drop-in's copy of conccl (first in the global scope), so the
        # ops run on the very communicators the drop-in made.
        self.ops = ctypes.CDLL(str(path))
        o = self.ops
        o.concclOpsAllGatherMatmul.argtypes = [_VP, _VP, _VP, _VP, _VP, _I64, _I64, _I64, ctypes.c_int, _VP]
        o.concclOpsMatmulReduceScatter.argtypes = [_VP, _VP, _VP, _VP, _VP, _I64, _I64, _I64, ctypes.c_int, _VP]
        o.concclOpsAllGatherMatmul.restype = o.concclOpsMatmulReduceScatter.restype = ctypes.c_int
        o.concclOpsReleaseComm.argtypes, o.concclOpsReleaseComm.restype = [_VP], ctypes.c_int
        o.concclOpsGetLastError.argtypes, o.concclOpsGetLastError.restype = [], ctypes.c_char_p


_native: Optional[_Native] = None
_comms: Dict[str, int] = {}  # group name -> concclComm_t


def _lib() -> _Native:
    global _native
    if _native is None:
        _native = _Native()
    return _native


def _group(group_name: str):
    from torch.distributed.distributed_c10d import _resolve_process_group

    return _resolve_process_group(group_name)


def _comm_for(group_name: str, device: torch.device) -> int:
    if group_name in _comms:
        return _comms[group_name]
    lib = _lib()
    pg = _group(group_name)
    backend = pg._get_backend(device)
    get_ptr = getattr(backend, "_comm_ptr", None)
    if get_ptr is None:
        raise RuntimeError(f"{type(backend).__name__} has no _comm_ptr(): the group must use the NCCL backend "
                           f"(torch {torch.__version__})")
    try:
        ptr = int(get_ptr())
    except RuntimeError:
        ptr = 0
    if ptr == 0:  # lazily initialised group: its communicator is made by its first collective
        dist.all_reduce(torch.zeros(1, device=device), group=pg)
        ptr = int(get_ptr())
    out = _VP()
    rc = lib.get_comm(_VP(ptr), ctypes.byref(out))
    if rc != 0 or not out.value:
        raise RuntimeError(f"group {group_name}: its NCCL communicator is not on conccl: "
                           f"{(lib.nccl_last_error(None) or b'').decode()}")
    _comms[group_name] = out.value
    return out.value


def conccl_comm(group: Optional[dist.ProcessGroup] = None) -> int:
    """The concclComm_t (as an int) behind `group`'s NCCL communicator on this rank's current device."""
    group = group or dist.group.WORLD
    return _comm_for(group.group_name, torch.device("cuda", torch.cuda.current_device()))


def release(group: Optional[dist.ProcessGroup] = None) -> None:
    """Frees what the ops library keeps for `group`'s communicator (call before destroy_process_group)."""
    group = group or dist.group.WORLD
    comm = _comms.pop(group.group_name, None)
    if comm is not None:
        torch.cuda.synchronize()
        _lib().ops.concclOpsReleaseComm(_VP(comm))


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"conccl {what} failed ({rc}): {(_lib().ops.concclOpsGetLastError() or b'').decode()}")


def _validate(name: str, x: torch.Tensor, y: torch.Tensor) -> None:
    if x.dim() != 2 or y.dim() != 2:
        raise ValueError(f"{name}: 2-D operands expected, got {tuple(x.shape)} and {tuple(y.shape)}")
    if x.shape[1] != y.shape[0]:
        raise ValueError(f"{name}: inner dimensions differ: {tuple(x.shape)} @ {tuple(y.shape)}")
    if x.dtype != y.dtype or x.dtype not in _CONCCL_TYPES:
        raise ValueError(f"{name}: bf16 or fp16 operands of one dtype expected, got {x.dtype} and {y.dtype}")


@torch.library.custom_op("conccl::all_gather_matmul", mutates_args=())
def _all_gather_matmul(a_shard: torch.Tensor, b: torch.Tensor, group_name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    _validate("all_gather_matmul", a_shard, b)
    a_shard, b = a_shard.contiguous(), b.contiguous()
    world = _group(group_name).size()
    m, k = a_shard.shape
    n = b.shape[1]
    a_full = a_shard.new_empty(world * m, k)
    c = a_shard.new_empty(world * m, n)
    comm = _comm_for(group_name, a_shard.device)
    stream = torch.cuda.current_stream(a_shard.device).cuda_stream
    _check(_lib().ops.concclOpsAllGatherMatmul(comm, a_shard.data_ptr(), a_full.data_ptr(), b.data_ptr(),
                                               c.data_ptr(), m, n, k, _CONCCL_TYPES[a_shard.dtype], stream),
           "all_gather_matmul")
    return a_full, c


@_all_gather_matmul.register_fake
def _(a_shard, b, group_name):
    world = _group(group_name).size()
    return (a_shard.new_empty(world * a_shard.shape[0], a_shard.shape[1]),
            a_shard.new_empty(world * a_shard.shape[0], b.shape[1]))


@torch.library.custom_op("conccl::matmul_reduce_scatter", mutates_args=())
def _matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, group_name: str) -> torch.Tensor:
    _validate("matmul_reduce_scatter", a, b)
    a, b = a.contiguous(), b.contiguous()
    world = _group(group_name).size()
    rows, k_shard = a.shape
    if rows % world:
        raise ValueError(f"matmul_reduce_scatter: {rows} rows do not split into {world} ranks")
    m, n = rows // world, b.shape[1]
    partial = a.new_empty(rows, n)  # workspace: this rank's partial product
    c = a.new_empty(m, n)
    comm = _comm_for(group_name, a.device)
    stream = torch.cuda.current_stream(a.device).cuda_stream
    _check(_lib().ops.concclOpsMatmulReduceScatter(comm, a.data_ptr(), b.data_ptr(), partial.data_ptr(),
                                                   c.data_ptr(), m, n, k_shard, _CONCCL_TYPES[a.dtype], stream),
           "matmul_reduce_scatter")
    return c


@_matmul_reduce_scatter.register_fake
def _(a, b, group_name):
    world = _group(group_name).size()
    return a.new_empty(a.shape[0] // world, b.shape[1])


def all_gather_matmul(a_shard: torch.Tensor, b: torch.Tensor,
                      group: Optional[dist.ProcessGroup] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """(allgather(a_shard), allgather(a_shard) @ b) over `group` (default: the world), the GEMM fed shard by shard
    as the shards land (copy engines). a_shard [m, k] per rank, b [k, n] the same on every rank."""
    return torch.ops.conccl.all_gather_matmul(a_shard, b, (group or dist.group.WORLD).group_name)


def matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, group: Optional[dist.ProcessGroup] = None) -> torch.Tensor:
    """This rank's rows [rank*m, (rank+1)*m) of the sum over ranks of a @ b. a [W*m, k] (this rank's K-columns),
    b [k, n] (this rank's K-rows)."""
    return torch.ops.conccl.matmul_reduce_scatter(a, b, (group or dist.group.WORLD).group_name)
