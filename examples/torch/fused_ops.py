"""conccl's fused ops on PyTorch tensors, through ctypes (include/conccl/ops/conccl_ops.h):
    C = allgather(A_shard) @ B    the all-gather feeds the GEMM shard by shard, on copy engines
    C = reduce_scatter(A @ B)     each rank's partial product, summed across ranks, each rank keeping its rows
ONE process drives every visible GPU: one rank per GPU from concclCommInitAll, the ...Group variants, each rank on its
device's current PyTorch stream (with a process per GPU, each would call the per-rank functions instead). The results
are checked against PyTorch's unfused computation (torch.cat + matmul; the sum of the partial products); exit status
0 = OK.

    CONCCL_LIB=build/libconccl.so CONCCL_OPS_LIB=build/libconccl_ops.so python examples/torch/fused_ops.py
With one GPU, two ranks share it (correct, but CUDA runs same-device copies on SMs). NRANKS overrides the rank count.
Keep the enum values in step with include/conccl/conccl.h by hand: concclSuccess = 0, concclBfloat16 = 7.
"""
import ctypes
import os
import sys

import torch  # first: it loads the cuBLASLt that libconccl_ops.so needs



def library(env, name):  # $env, else the repository's build/ or build-gpu/ if built there, else the loader path
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    built = [p for p in (os.path.join(root, d, name) for d in ("build", "build-gpu")) if os.path.exists(p)]
    return os.environ.get(env) or (built[0] if built else name)


try:
    lib = ctypes.CDLL(library("CONCCL_LIB", "libconccl.so"))
    ops = ctypes.CDLL(library("CONCCL_OPS_LIB", "libconccl_ops.so"))  # its libconccl.so.0 is the one loaded above
except OSError as e:  # e.g. libcublasLt.so.13 not found: put the CUDA toolkit's lib64 on LD_LIBRARY_PATH
    sys.exit(f"cannot load conccl: {e} (set CONCCL_LIB and CONCCL_OPS_LIB)")

concclSuccess, concclBfloat16 = 0, 7
P, I64 = ctypes.POINTER(ctypes.c_void_p), ctypes.c_int64
lib.concclGetErrorString.argtypes, lib.concclGetErrorString.restype = [ctypes.c_int], ctypes.c_char_p
lib.concclGetLastError.argtypes, lib.concclGetLastError.restype = [ctypes.c_void_p], ctypes.c_char_p
lib.concclCommInitAll.argtypes = [P, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_void_p]
lib.concclCommDestroy.argtypes = [ctypes.c_void_p]
ops.concclOpsGetLastError.argtypes, ops.concclOpsGetLastError.restype = [], ctypes.c_char_p
ops.concclOpsAllGatherMatmulGroup.argtypes = [ctypes.c_int, P, P, P, P, P, I64, I64, I64, ctypes.c_int, P]
ops.concclOpsMatmulReduceScatterGroup.argtypes = [ctypes.c_int, P, P, P, P, P, I64, I64, I64, ctypes.c_int, P]
ops.concclOpsReleaseComm.argtypes = [ctypes.c_void_p]


def check(result, text):
    if result != concclSuccess:
        raise RuntimeError(f"{lib.concclGetErrorString(result).decode()}: {text().decode()}")


def sync_all():
    for d in range(torch.cuda.device_count()):
        torch.cuda.synchronize(d)


def array(values):  # a C array of pointers: tensors' data_ptr(), streams, communicators
    return (ctypes.c_void_p * len(values))(*values)


gpus = torch.cuda.device_count()
if gpus < 1:
    sys.exit("no CUDA device visible")
nranks = int(os.environ.get("NRANKS", gpus if gpus >= 2 else 2))
devs = [r % gpus for r in range(nranks)]
comms = (ctypes.c_void_p * nranks)()
check(lib.concclCommInitAll(comms, nranks, (ctypes.c_int * nranks)(*devs), None), lambda: lib.concclGetLastError(None))
# A rank's stream: its device's current stream; ranks sharing a GPU need a stream each (one would serialise them).
streams = [torch.cuda.current_stream(d) if devs.index(d) == r else torch.cuda.Stream(d) for r, d in enumerate(devs)]
ok = True
torch.manual_seed(0)
try:
    # AllGather -> GEMM: A_shard [mShard, k] per rank, B [k, n] the same on every rank, C [nranks*mShard, n].
    m_shard, n, k = 256, 512, 1024
    shards = [torch.randn(m_shard, k, dtype=torch.bfloat16, device=d) for d in devs]
    b0 = torch.randn(k, n, dtype=torch.bfloat16, device=devs[0]) / k**0.5
    bs = [b0.to(d) for d in devs]
    full = [torch.empty(nranks * m_shard, k, dtype=torch.bfloat16, device=d) for d in devs]
    cs = [torch.empty(nranks * m_shard, n, dtype=torch.bfloat16, device=d) for d in devs]
    sync_all()  # the inputs were written on the current streams, which some ranks do not use
    ptr = lambda ts: array([t.data_ptr() for t in ts])  # noqa: E731
    check(ops.concclOpsAllGatherMatmulGroup(nranks, comms, ptr(shards), ptr(full), ptr(bs), ptr(cs), m_shard, n, k,
                                            concclBfloat16, array([s.cuda_stream for s in streams])),
          ops.concclOpsGetLastError)
    for s in streams:
        s.synchronize()
    a_ref = torch.cat([x.to(devs[0]) for x in shards])
    want = (a_ref @ b0).float()  # PyTorch's unfused GEMM (bf16, fp32 accumulation)
    err = max((c.to(devs[0]).float() - want).abs().max().item() for c in cs) / want.abs().max().item()
    gathered = all(torch.equal(f.to(devs[0]), a_ref) for f in full)
    good = err <= 2.0**-7 and gathered  # 2^-7: one bf16 rounding of the result (2^-8) with margin
    print(f"allgather_matmul: {nranks} ranks on GPUs {devs}: max error {err:.2e} of max|C|, gathered A "
          f"{'exact' if gathered else 'WRONG'}: {'OK' if good else 'FAIL'}")
    ok = ok and good

    # GEMM -> ReduceScatter: A [nranks*mShard, kShard] and B [kShard, n] per rank (its K-slice), C [mShard, n].
    m_shard, n, k_shard = 256, 1024, 512
    a_s = [torch.randn(nranks * m_shard, k_shard, dtype=torch.bfloat16, device=d) for d in devs]
    b_s = [torch.randn(k_shard, n, dtype=torch.bfloat16, device=d) / (nranks * k_shard) ** 0.5 for d in devs]
    partial = [torch.empty(nranks * m_shard, n, dtype=torch.bfloat16, device=d) for d in devs]
    cs = [torch.empty(m_shard, n, dtype=torch.bfloat16, device=d) for d in devs]
    sync_all()
    check(ops.concclOpsMatmulReduceScatterGroup(nranks, comms, ptr(a_s), ptr(b_s), ptr(partial), ptr(cs), m_shard, n,
                                                k_shard, concclBfloat16, array([s.cuda_stream for s in streams])),
          ops.concclOpsGetLastError)
    for s in streams:
        s.synchronize()
    want = sum((a @ b).float().to(devs[0]) for a, b in zip(a_s, b_s))  # the sum of the bf16 partial products
    err = max((c.to(devs[0]).float() - want[r * m_shard:(r + 1) * m_shard]).abs().max().item()
              for r, c in enumerate(cs)) / want.abs().max().item()
    good = err <= 2.0**-7
    print(f"matmul_reduce_scatter: {nranks} ranks on GPUs {devs}: max error {err:.2e} of max|C|: "
          f"{'OK' if good else 'FAIL'}")
    ok = ok and good
finally:
    sync_all()
    for comm in comms:
        ops.concclOpsReleaseComm(comm)
        lib.concclCommDestroy(comm)
print("OK" if ok else "FAIL")
sys.exit(0 if ok else 1)
