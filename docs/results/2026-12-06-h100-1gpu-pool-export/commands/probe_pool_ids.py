"""Probe (2026-12-06, session 51): what the driver says about allocations of a shareable pool, for the design of pool
exports (BufferExport::kPool). Driver API only (ctypes on libcuda), two processes (fork before any CUDA call).
  P1 a pool allocation's range (RANGE_START_ADDR / RANGE_SIZE) and buffer id, for its base and an interior pointer;
     two live allocations have distinct ids;
  P2 after cuMemFreeAsync (+ sync): what a query of the freed address returns; a new allocation at the same address
     gets a new buffer id;
  P3 cuMemPoolExportPointer of an interior pointer;
  P4 the peer: cuMemPoolImportFromShareableHandle, cuMemPoolSetAccess for its own device, import pointer: costs (us);
  P5 the peer imports allocation A at address P, the owner frees A and allocates B at P, the peer imports B, frees its
     import of A, then reads B through its import of B: right data?
  P6 (run 2) the export of B against A's, byte for byte; P7 (run 2) cuMemPoolExportPointer's cost by allocation size;
  P8 (run 3) the VMM view of a pool allocation: attributes, cuMemGetAddressRange, cuMemRetainAllocationHandle, and the
     export of the retained handle (what conccl's VMM units need).
Prints one line per answer. Run: python3 probe_pool_ids.py
"""
import ctypes
import os
import socket
import struct
import time

N = 1 << 24  # bytes


class PoolProps(ctypes.Structure):
    _fields_ = [("allocType", ctypes.c_int), ("handleTypes", ctypes.c_int), ("locType", ctypes.c_int),
                ("locId", ctypes.c_int), ("win32", ctypes.c_void_p), ("maxSize", ctypes.c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]


class AccessDesc(ctypes.Structure):
    _fields_ = [("locType", ctypes.c_int), ("locId", ctypes.c_int), ("flags", ctypes.c_int)]


def ctx():
    cu = ctypes.CDLL("libcuda.so.1")
    assert cu.cuInit(0) == 0
    c = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(c), 0) == 0
    assert cu.cuCtxSetCurrent(c) == 0
    return cu


def attrs(cu, p):
    start, size, bid = ctypes.c_uint64(), ctypes.c_size_t(), ctypes.c_uint64()
    r1 = cu.cuPointerGetAttribute(ctypes.byref(start), 11, ctypes.c_uint64(p))  # RANGE_START_ADDR
    r2 = cu.cuPointerGetAttribute(ctypes.byref(size), 12, ctypes.c_uint64(p))  # RANGE_SIZE
    r3 = cu.cuPointerGetAttribute(ctypes.byref(bid), 7, ctypes.c_uint64(p))  # BUFFER_ID
    return (r1, start.value - p if r1 == 0 else None, r2, size.value, r3, bid.value)


def alloc(cu, pool, n, fill):
    p = ctypes.c_uint64()
    assert cu.cuMemAllocFromPoolAsync(ctypes.byref(p), ctypes.c_size_t(n), pool, None) == 0
    assert cu.cuMemsetD8_v2(p, ctypes.c_ubyte(fill), ctypes.c_size_t(n)) == 0
    assert cu.cuCtxSynchronize() == 0
    return p.value


def owner(sock):
    cu = ctx()
    props = PoolProps()
    props.allocType, props.handleTypes, props.locType, props.locId = 1, 1, 1, 0
    pool = ctypes.c_void_p()
    assert cu.cuMemPoolCreate(ctypes.byref(pool), ctypes.byref(props)) == 0
    thr = ctypes.c_uint64(2**64 - 1)
    cu.cuMemPoolSetAttribute(pool, 4, ctypes.byref(thr))
    a = alloc(cu, pool, N, 1)
    b = alloc(cu, pool, N, 2)
    print(f"P1 base A: (rc, start-ptr, rc, size, rc, id) {attrs(cu, a)}; interior A+4096 {attrs(cu, a + 4096)}; "
          f"B {attrs(cu, b)}", flush=True)
    data = (ctypes.c_ubyte * 64)()
    data2 = (ctypes.c_ubyte * 64)()
    r = cu.cuMemPoolExportPointer(ctypes.byref(data2), ctypes.c_uint64(a + 4096))
    rb = cu.cuMemPoolExportPointer(ctypes.byref(data), ctypes.c_uint64(a))
    data_a = bytes(data)
    print(f"P3 export of an interior pointer: rc {r}; of the base: rc {rb}", flush=True)
    fd = ctypes.c_int(-1)
    assert cu.cuMemPoolExportToShareableHandle(ctypes.byref(fd), pool, 1, ctypes.c_ulonglong(0)) == 0
    socket.send_fds(sock, [b"P" + bytes(data)], [fd.value])
    assert sock.recv(1) == b"1"
    ida = attrs(cu, a)[5]
    assert cu.cuMemFreeAsync(ctypes.c_uint64(a), None) == 0
    assert cu.cuCtxSynchronize() == 0
    print(f"P2 freed A, query of its address: {attrs(cu, a)}", flush=True)
    c = alloc(cu, pool, N, 3)
    print(f"P2 new allocation C at A's address: {c == a}; C {attrs(cu, c)}; A's id was {ida}", flush=True)
    r = cu.cuMemPoolExportPointer(ctypes.byref(data), ctypes.c_uint64(c))
    # P6 (run 2): the export of a later allocation at the same address and size, byte for byte against the freed one's.
    print(f"P6 C's export rc {r}, equal to A's export: {bytes(data) == bytes(data_a)}", flush=True)
    # P7 (run 2): the owner's cost of cuMemPoolExportPointer by allocation size (a fresh allocation each time).
    for mib in (1, 16, 64, 1024):
        p = alloc(cu, pool, mib << 20, 0)
        t0 = time.perf_counter()
        r7 = cu.cuMemPoolExportPointer(ctypes.byref(data2), ctypes.c_uint64(p))
        t1 = time.perf_counter()
        r8 = cu.cuMemPoolExportPointer(ctypes.byref(data2), ctypes.c_uint64(p))
        t2 = time.perf_counter()
        print(f"P7 export of a {mib} MiB allocation: rc {r7} {1e6*(t1-t0):.1f} us, again rc {r8} {1e6*(t2-t1):.1f} us",
              flush=True)
        cu.cuMemFreeAsync(ctypes.c_uint64(p), None)
        cu.cuCtxSynchronize()
    # P8 (run 3): the VMM view of a shareable pool's allocation: pointer attributes, its piece, its retained handle.
    legacy, mapped, allowed = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint64()
    ra = cu.cuPointerGetAttribute(ctypes.byref(legacy), 10, ctypes.c_uint64(c))  # IS_LEGACY_CUDA_IPC_CAPABLE
    rb = cu.cuPointerGetAttribute(ctypes.byref(mapped), 13, ctypes.c_uint64(c))  # MAPPED
    rc = cu.cuPointerGetAttribute(ctypes.byref(allowed), 14, ctypes.c_uint64(c))  # ALLOWED_HANDLE_TYPES
    mb, ms, blk = ctypes.c_uint64(), ctypes.c_size_t(), ctypes.c_uint64()
    rm = cu.cuPointerGetAttribute(ctypes.byref(mb), 19, ctypes.c_uint64(c))  # MAPPING_BASE_ADDR
    cu.cuPointerGetAttribute(ctypes.byref(ms), 18, ctypes.c_uint64(c))  # MAPPING_SIZE
    cu.cuPointerGetAttribute(ctypes.byref(blk), 20, ctypes.c_uint64(c))  # MEMORY_BLOCK_ID
    pb, ps = ctypes.c_uint64(), ctypes.c_size_t()
    rr = cu.cuMemGetAddressRange_v2(ctypes.byref(pb), ctypes.byref(ps), ctypes.c_uint64(c))
    h = ctypes.c_uint64()
    rh = cu.cuMemRetainAllocationHandle(ctypes.byref(h), ctypes.c_void_p(c))
    fd2 = ctypes.c_int(-1)
    rx = cu.cuMemExportToShareableHandle(ctypes.byref(fd2), h, 1, ctypes.c_ulonglong(0)) if rh == 0 else -1
    print(f"P8 legacy IPC rc {ra} = {legacy.value}, mapped rc {rb} = {mapped.value}, allowed handle types rc {rc} = "
          f"{allowed.value}; mapping rc {rm}: base-ptr {mb.value - c if rm == 0 else None}, {ms.value} B, block "
          f"{blk.value}; address range rc {rr}: base-ptr {pb.value - c if rr == 0 else None}, {ps.value} B; "
          f"retain rc {rh}; export of the retained handle rc {rx}", flush=True)
    if rh == 0:
        cu.cuMemRelease(h)
    sock.sendall(b"C" + bytes(data))
    assert sock.recv(1) == b"2"
    sock.sendall(b"3")


def importer(sock):
    msg, fds, _, _ = socket.recv_fds(sock, 100, 1)
    cu = ctx()
    t0 = time.perf_counter()
    pool = ctypes.c_void_p()
    rc = cu.cuMemPoolImportFromShareableHandle(ctypes.byref(pool), ctypes.c_void_p(fds[0]), 1, ctypes.c_ulonglong(0))
    t1 = time.perf_counter()
    desc = AccessDesc(1, 0, 3)
    rs = cu.cuMemPoolSetAccess(pool, ctypes.byref(desc), ctypes.c_size_t(1))
    t2 = time.perf_counter()
    data = (ctypes.c_ubyte * 64).from_buffer_copy(msg[1:65])
    pa = ctypes.c_uint64()
    ri = cu.cuMemPoolImportPointer(ctypes.byref(pa), pool, ctypes.byref(data))
    t3 = time.perf_counter()
    host = (ctypes.c_ubyte * 16)()
    cu.cuMemcpyDtoH_v2(host, pa, ctypes.c_size_t(16))
    print(f"P4 pool import rc {rc} {1e6*(t1-t0):.0f} us, set access (own device) rc {rs} {1e6*(t2-t1):.0f} us, "
          f"pointer import rc {ri} {1e6*(t3-t2):.0f} us, reads A's bytes {list(host)[:4]}; imported ptr query "
          f"{attrs(cu, pa.value)}", flush=True)
    sock.sendall(b"1")
    msg = sock.recv(100)
    data = (ctypes.c_ubyte * 64).from_buffer_copy(msg[1:65])
    pc = ctypes.c_uint64()
    t0 = time.perf_counter()
    ri = cu.cuMemPoolImportPointer(ctypes.byref(pc), pool, ctypes.byref(data))
    t1 = time.perf_counter()
    rf = cu.cuMemFree_v2(pa)
    t2 = time.perf_counter()
    cu.cuMemcpyDtoH_v2(host, pc, ctypes.c_size_t(16))
    print(f"P5 import of C rc {ri} {1e6*(t1-t0):.0f} us (same address as the import of A: {pc.value == pa.value}); "
          f"free of the import of A rc {rf} {1e6*(t2-t1):.0f} us; C read through its import {list(host)[:4]} "
          f"(3 = right)", flush=True)
    t0 = time.perf_counter()
    rf = cu.cuMemFree_v2(pc)
    print(f"P5 free of the import of C rc {rf} {1e6*(time.perf_counter()-t0):.0f} us", flush=True)
    sock.sendall(b"2")
    assert sock.recv(1) == b"3"


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
