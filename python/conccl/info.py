"""`conccl info`: GPUs, peer access / NVLink, copy engines, NCCL and driver versions, and which communicators the
drop-in would run on conccl. Reads the CUDA driver API (libcuda.so.1) and NVML (libnvidia-ml.so.1) through ctypes:
no torch needed, and no CUDA context is created (cuInit and device queries only). Without a driver or a GPU it says
"no GPU" and still reports the rest.
"""
from __future__ import annotations

import ctypes
import os
import sys
from typing import Dict, List, Mapping, Optional

# CUdevice_attribute values (cuda.h)
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
NVML_P2P_CAPS_INDEX_NVLINK = 2  # nvmlGpuP2PCapsIndex_t
NVML_P2P_STATUS_OK = 0


def _load(names):
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def gpu_report(cuda=None, nvml=None) -> Dict:
    """{"gpus": [...], "peer": [[...]], "driver": ..., "error"?: ...}. `cuda` / `nvml`: loaded libraries (tests pass
    fakes or None); by default libcuda.so.1 and libnvidia-ml.so.1 if present."""
    report: Dict = {"gpus": [], "peer": [], "nvlink": [], "driver": None, "driver_version": None}
    cuda = cuda if cuda is not None else _load(["libcuda.so.1", "libcuda.so"])
    if cuda is None:
        report["error"] = "no CUDA driver (libcuda.so.1 not found)"
        return report
    if cuda.cuInit(0) != 0:
        report["error"] = "cuInit failed (no GPU, or the driver is not usable)"
        return report
    v = ctypes.c_int(0)
    if cuda.cuDriverGetVersion(ctypes.byref(v)) == 0:
        report["driver"] = f"CUDA {v.value // 1000}.{(v.value % 1000) // 10}"
    n = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value == 0:
        report["error"] = "no GPU visible"
        return report
    nvml = nvml if nvml is not None else _load(["libnvidia-ml.so.1"])
    if nvml is not None and nvml.nvmlInit_v2() != 0:
        nvml = None
    if nvml is not None:
        buf = ctypes.create_string_buffer(96)
        if nvml.nvmlSystemGetDriverVersion(buf, 96) == 0:
            report["driver_version"] = buf.value.decode()
    handles = []
    for i in range(n.value):
        dev = ctypes.c_int(0)
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGetName(name, 256, dev)
        mem = ctypes.c_size_t(0)
        cuda.cuDeviceTotalMem_v2(ctypes.byref(mem), dev)

        def attr(a):
            out = ctypes.c_int(0)
            return out.value if cuda.cuDeviceGetAttribute(ctypes.byref(out), a, dev) == 0 else None

        bus = ctypes.create_string_buffer(64)
        cuda.cuDeviceGetPCIBusId(bus, 64, dev)
        handle = None
        if nvml is not None:
            h = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByPciBusId_v2(bus.value, ctypes.byref(h)) == 0:
                handle = h
        handles.append(handle)
        report["gpus"].append({
            "index": i, "name": name.value.decode(), "memory_gib": round(mem.value / 2**30, 1),
            "sms": attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            "copy_engines": attr(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT),
            "compute_capability": f"{attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)}."
                                  f"{attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)}",
            "pci_bus_id": bus.value.decode(),
        })
    for i in range(n.value):
        row, links = [], []
        for j in range(n.value):
            if i == j:
                row.append(None)
                links.append(None)
                continue
            can = ctypes.c_int(0)
            di, dj = ctypes.c_int(0), ctypes.c_int(0)
            cuda.cuDeviceGet(ctypes.byref(di), i)
            cuda.cuDeviceGet(ctypes.byref(dj), j)
            row.append(cuda.cuDeviceCanAccessPeer(ctypes.byref(can), di, dj) == 0 and bool(can.value))
            nv = None
            if handles[i] is not None and handles[j] is not None:
                status = ctypes.c_int(-1)
                if nvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], NVML_P2P_CAPS_INDEX_NVLINK,
                                               ctypes.byref(status)) == 0:
                    nv = status.value == NVML_P2P_STATUS_OK
            links.append(nv)
        report["peer"].append(row)
        report["nvlink"].append(links)
    return report


def peer_matrix_lines(peer: List[List[Optional[bool]]], nvlink: List[List[Optional[bool]]]) -> List[str]:
    """The matrix as text: NV = peer access over NVLink, P = peer access (not NVLink, or NVML unavailable),
    - = no peer access (conccl then cannot copy between the two GPUs directly), X = the GPU itself."""
    n = len(peer)
    lines = ["      " + "".join(f"GPU{j:<3}" for j in range(n))]
    for i in range(n):
        cells = []
        for j in range(n):
            if i == j:
                cells.append("X")
            elif peer[i][j]:
                cells.append("NV" if nvlink and nvlink[i][j] else "P")
            else:
                cells.append("-")
        lines.append(f"GPU{i:<3}" + "".join(f"{c:<6}" for c in cells))
    return lines


def render(report: Dict) -> List[str]:
    """The human-readable lines of `conccl info` for a report made by collect()."""
    lines = []
    g = report["gpu"]
    if not g["gpus"]:
        lines.append(f"GPUs: no GPU ({g.get('error', 'none visible')})")
    else:
        lines.append(f"GPUs: {len(g['gpus'])}")
        for d in g["gpus"]:
            lines.append(f"  GPU{d['index']}: {d['name']}, {d['memory_gib']} GiB, {d['sms']} SMs, "
                         f"sm_{d['compute_capability'].replace('.', '')}, copy engines (asyncEngineCount) "
                         f"{d['copy_engines']}, {d['pci_bus_id']}")
        lines.append("peer access (NV: over NVLink, P: peer access without NVLink or NVML, -: none):")
        lines += ["  " + line for line in peer_matrix_lines(g["peer"], g["nvlink"])]
    lines.append(f"driver: {g.get('driver_version') or '-'} ({g.get('driver') or 'no CUDA driver'})")
    lines.append(f"conccl libraries: {report['lib_dir']}")
    for name, path in report["libraries"].items():
        lines.append(f"  {name}: {path or 'not built'}")
    shim_v = report.get("shim_nccl_abi")
    lines.append(f"NCCL the drop-in implements: {shim_v or '-'}")
    t = report.get("torch_nccl") or {}
    if t.get("version") is not None:
        lines.append(f"NCCL torch loads: {t['version']} ({t.get('source')}{', ' + t['path'] if t.get('path') else ''})")
    else:
        lines.append(f"NCCL torch loads: unknown ({t.get('error', 'not probed')})")
    if report.get("abi"):
        lines.append(f"ABI check: {report['abi']}")
    r = report["routing"]
    lines.append(f"communicators under `conccl run` in this environment: {r['path']} ({r['reason']}); "
                 f"collectives on conccl: {r['collectives']}")
    lines.append("  rule (src/nccl/shim_init.cc): each communicator finds out at init whether its ranks share this "
                 "host -> conccl, else -> the real NCCL; CONCCL_NCCL_SHIM=0 -> the real NCCL; without a usable "
                 "network interface the launchers' variables decide (WORLD_SIZE != LOCAL_WORLD_SIZE ... -> NCCL), "
                 "which is what the line above evaluates")
    return lines


def collect(environ: Optional[Mapping[str, str]] = None, probe_torch: bool = True, cuda=None, nvml=None) -> Dict:
    from . import abi, routing
    from ._libs import LIBRARIES, find_library, lib_dir
    from .launcher import probe_torch_nccl, shim_abi_version

    environ = dict(os.environ if environ is None else environ)
    report: Dict = {"gpu": gpu_report(cuda, nvml), "lib_dir": str(lib_dir(environ))}
    report["libraries"] = {name: (str(find_library(name, environ)) if find_library(name, environ) else None)
                           for name in LIBRARIES}
    shim = find_library("nccl_shim", environ)
    code = shim_abi_version(str(shim)) if shim else None
    report["shim_nccl_abi"] = abi.format_version(abi.parse_nccl_version(code)) if code else None
    if probe_torch:
        t = probe_torch_nccl(sys.executable, environ, timeout_s=60)
        if isinstance(t.get("version"), list):
            t["version"] = ".".join(str(x) for x in t["version"])
        elif isinstance(t.get("version"), int):
            t["version"] = abi.format_version(abi.parse_nccl_version(t["version"]))
        report["torch_nccl"] = t
        if code:
            report["abi"] = abi.check_abi(code, t.get("version"), "torch").reason
    path, reason = routing.decide(environ)
    report["routing"] = {"path": path, "reason": reason, "collectives": routing.collectives(environ)}
    return report
