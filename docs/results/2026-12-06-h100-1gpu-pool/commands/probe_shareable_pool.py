"""Probe (2026-12-06): can cudaMallocAsync memory that PyTorch hands out be shared with a peer process?

Questions for the design of docs/dev/next-steps.md item 0 (pool memory moved directly), answered on the GPU machine:
  Q1 a pool with a POSIX descriptor handle type can be created here;
  Q2 made the device's current pool before PyTorch's first allocation, PyTorch's cudaMallocAsync backend
     (PYTORCH_ALLOC_CONF=backend:cudaMallocAsync) allocates from it; what memory_reserved / empty_cache then report;
  Q3 a peer process imports the pool (descriptor over a socket) and one tensor's pointer, and reads the right data;
  Q4 after the owner frees the tensor and allocates another at the same place: what the peer's old import reads, and
     whether importing the old export again succeeds; freeing the import after the owner freed.
Two processes (fork before any CUDA call, a socketpair between them). Prints one line per answer; exit 0 unless the
probe itself broke. Run: PY probe_shareable_pool.py
"""
import ctypes
import os
import socket
import struct
import sys

os.environ["PYTORCH_ALLOC_CONF"] = "backend:cudaMallocAsync"
os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
N = 1 << 22  # floats: 16 MiB


def driver():
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    return cu


class PoolProps(ctypes.Structure):
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int), ("locType", ctypes.c_int),
                ("locId", ctypes.c_int), ("win32", ctypes.c_void_p), ("maxSize", ctypes.c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]


def pool_of(cu, ptr):
    handle = ctypes.c_void_p()
    rc = cu.cuPointerGetAttribute(ctypes.byref(handle), 17, ctypes.c_uint64(ptr))  # CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
    return rc, handle.value


def pool_attr(cu, pool, attr):
    v = ctypes.c_uint64()
    rc = cu.cuMemPoolGetAttribute(ctypes.c_void_p(pool), attr, ctypes.byref(v))
    return v.value if rc == 0 else f"rc {rc}"


def owner(sock):
    cu = driver()
    props = PoolProps()
    props.allocType, props.handleTypes, props.locType, props.locId = 1, 1, 1, 0
    pool = ctypes.c_void_p()
    rc = cu.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(props))
    print(f"Q1 shareable pool created: rc {rc}", flush=True)
    if rc != 0:
        sock.sendall(b"X")
        return
    threshold = ctypes.c_uint64(2**64 - 1)
    print(f"   release threshold set: rc {cu.cuMemPoolSetAttribute(pool, 4, ctypes.byref(threshold))}", flush=True)
    print(f"   made the device's current pool: rc {cu.cuDeviceSetMemPool(0, pool)}", flush=True)
    import torch
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    rc, p = pool_of(cu, x.data_ptr())
    print(f"Q2 PyTorch tensor's pool is ours: {p == pool.value} (rc {rc}); torch.cuda.memory_reserved "
          f"{torch.cuda.memory_reserved()}, our pool reserved {pool_attr(cu, pool.value, 5)}", flush=True)
    fd = ctypes.c_int(-1)
    rc = cu.cuMemPoolExportToShareableHandle(ctypes.byref(fd), pool, 1, ctypes.c_ulonglong(0))
    data = (ctypes.c_ubyte * 64)()
    rc2 = cu.cuMemPoolExportPointer(ctypes.byref(data), ctypes.c_uint64(x.data_ptr()))
    print(f"   exported the pool (rc {rc}) and the tensor's pointer (rc {rc2})", flush=True)
    socket.send_fds(sock, [b"P" + bytes(data)], [fd.value])
    assert sock.recv(1) == b"1"  # the peer read it
    old = x.data_ptr()
    del x
    torch.cuda.synchronize()
    y = torch.full((N,), 7.0, device="cuda")
    torch.cuda.synchronize()
    print(f"Q4 after del + a new tensor: same address {y.data_ptr() == old}", flush=True)
    sock.sendall(b"2")
    assert sock.recv(1) == b"3"
    del y
    torch.cuda.synchronize()
    before = pool_attr(cu, pool.value, 5)
    torch.cuda.empty_cache()
    print(f"Q2 empty_cache: our pool reserved {before} -> {pool_attr(cu, pool.value, 5)}; "
          f"torch.cuda.memory_reserved {torch.cuda.memory_reserved()}", flush=True)
    sock.sendall(b"4")


def importer(sock):
    msg, fds, _, _ = socket.recv_fds(sock, 100, 1)
    if msg[:1] != b"P":
        return
    cu = driver()
    import torch
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    pool = ctypes.c_void_p()
    rc = cu.cuMemPoolImportFromShareableHandle(ctypes.byref(pool), ctypes.c_void_p(fds[0]), 1, ctypes.c_ulonglong(0))
    data = (ctypes.c_ubyte * 64).from_buffer_copy(msg[1:65])
    ptr = ctypes.c_uint64()
    rc2 = cu.cuMemPoolImportPointer(ctypes.byref(ptr), pool, ctypes.byref(data)) if rc == 0 else -1
    got = torch.empty(N, device="cuda")
    ok = "-"
    if rc2 == 0:
        rc3 = cu.cuMemcpyDtoD_v2(ctypes.c_uint64(got.data_ptr()), ptr, ctypes.c_size_t(N * 4))
        torch.cuda.synchronize()
        ok = f"copy rc {rc3}, right {bool(torch.equal(got, torch.arange(N, dtype=torch.float32, device='cuda')))}"
    print(f"Q3 peer imported the pool (rc {rc}) and the pointer (rc {rc2}): {ok}", flush=True)
    sock.sendall(b"1")
    assert sock.recv(1) == b"2"
    if rc2 == 0:
        rc3 = cu.cuMemcpyDtoD_v2(ctypes.c_uint64(got.data_ptr()), ptr, ctypes.c_size_t(N * 4))
        torch.cuda.synchronize()
        sevens = bool(torch.all(got == 7.0))
        print(f"Q4 old import after the owner's free + new tensor: copy rc {rc3}, reads the new tensor {sevens}",
              flush=True)
        again = ctypes.c_uint64()
        print(f"Q4 importing the old export again: rc {cu.cuMemPoolImportPointer(ctypes.byref(again), pool, ctypes.byref(data))}",
              flush=True)
        print(f"Q4 freeing the old import after the owner freed: rc {cu.cuMemFree_v2(ptr)}", flush=True)
    sock.sendall(b"3")
    assert sock.recv(1) == b"4"


def main():
    a, b = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        try:
            importer(b)
        finally:
            os._exit(0)
    owner(a)
    _, status = os.waitpid(pid, 0)
    print(f"importer exit status {status}", flush=True)


if __name__ == "__main__":
    main()
