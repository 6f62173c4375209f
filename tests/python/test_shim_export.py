"""The drop-in's own exports (include/conccl/nccl_shim.h), on the library the package holds (skipped when the package
was built without CUDA and nccl.h 2.28). No GPU needed: neither function touches CUDA."""
import ctypes

import pytest

from conccl import find_library, launcher


@pytest.fixture(scope="module")
def shim():
    path = find_library("nccl_shim")
    if path is None:
        pytest.skip("package built without the NCCL drop-in")
    lib = ctypes.CDLL(str(path))
    lib.concclNcclShimGetComm.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.ncclGetLastError.argtypes, lib.ncclGetLastError.restype = [ctypes.c_void_p], ctypes.c_char_p
    return path, lib


def test_abi_version(shim):
    path, _ = shim
    assert launcher.shim_abi_version(str(path)) == 22809


def test_get_comm_refuses_what_it_did_not_make(shim):
    _, lib = shim
    out = ctypes.c_void_p(1)
    assert lib.concclNcclShimGetComm(None, ctypes.byref(out)) == 4 and not out.value
    fake = ctypes.create_string_buffer(256)  # not a shim communicator (no magic)
    assert lib.concclNcclShimGetComm(ctypes.addressof(fake), ctypes.byref(out)) == 4
    assert b"not a communicator of this shim" in lib.ncclGetLastError(None)
    assert lib.concclNcclShimGetComm(ctypes.addressof(fake), None) == 4


def test_package_holds_the_libraries():
    assert find_library("conccl") is not None or pytest.skip("running from the source tree, nothing built")


def test_take_call_ns_counts_each_outermost_call_once(shim):
    _, lib = shim
    take = lib.concclNcclShimTakeCallNs
    take.restype, take.argtypes = ctypes.c_uint64, [ctypes.POINTER(ctypes.c_uint64)]
    coll = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
            ctypes.c_void_p]
    lib.ncclAllReduce.argtypes = coll
    lib.ncclBcast.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_void_p,
                              ctypes.c_void_p]
    calls = ctypes.c_uint64(99)
    take(None)  # whatever this thread did before
    assert take(ctypes.byref(calls)) == 0 and calls.value == 0
    # NULL communicators: refused (ncclInvalidArgument) before CUDA or the real NCCL is touched, but timed.
    assert lib.ncclAllReduce(None, None, 1, 7, 0, None, None) == 4
    assert lib.ncclAllReduce(None, None, 1, 7, 0, None, None) == 4
    assert lib.ncclBcast(None, 1, 7, 0, None, None) == 4
    ns = take(ctypes.byref(calls))
    assert calls.value == 3 and ns > 0
    assert take(ctypes.byref(calls)) == 0 and calls.value == 0  # reset by the take


def test_registration_counts_count_only_accepted_registrations(shim):
    _, lib = shim
    counts = lib.concclNcclShimRegistrationCounts
    counts.restype, counts.argtypes = None, [ctypes.POINTER(ctypes.c_uint64)] * 4
    lib.ncclCommRegister.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_void_p)]
    lib.ncclCommDeregister.argtypes = [ctypes.c_void_p, ctypes.c_void_p]

    def read():
        v = [ctypes.c_uint64(7) for _ in range(4)]
        counts(*[ctypes.byref(x) for x in v])
        return [x.value for x in v]

    before = read()
    counts(None, None, None, None)  # every output is optional
    handle = ctypes.c_void_p()
    # Refused (NULL communicator): not counted.
    assert lib.ncclCommRegister(None, None, 16, ctypes.byref(handle)) == 4
    assert lib.ncclCommDeregister(None, None) == 4
    assert read() == before
