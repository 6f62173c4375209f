"""Readers of benchmark results, standard library only (used on the GPU machine by sweep_summary.py and here by
plot_bench.py).

- conccl-bench JSON lines (docs/bench.md): a metadata line, then one object per row and variant.
- nccl-tests text output (NVIDIA/nccl-tests, default columns): rows of
  size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong (out of place | in place).

Both give `Point`s keyed by (source, coll, size, in_place); source is the conccl-bench backend name
("conccl", "nccl", ...) or "nccl-tests".
"""

import json
import math
import re
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Tuple

# nccl-tests binary stem -> conccl-bench collective name.
NCCL_TESTS_COLL = {
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "all_reduce": "all_reduce",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "alltoall": "all_to_all",
    "gather": "gather",
    "scatter": "scatter",
    "sendrecv": "sendrecv",
}
COLL_ORDER = list(NCCL_TESTS_COLL.values())


@dataclass
class Point:
    source: str  # backend name or "nccl-tests"
    coll: str
    size: int  # bytes, nccl-tests convention
    in_place: bool
    time_us: Optional[float]
    busbw: Optional[float]  # GB/s
    wrong: Optional[int] = None
    sms: Optional[str] = None  # conccl-bench's sms label ("0", "<=32", ...)
    host_us: Optional[float] = None
    threads: int = 1


def read_conccl_bench(lines: Iterable[str]) -> List[Point]:
    """Rows of a conccl-bench --json file (the metadata line and failed rows skipped)."""
    points = []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        row = json.loads(line)
        if row.get("metadata") or row.get("time_us") is None:
            continue
        sms = row.get("sms", -1)
        label = "?" if sms is None or sms < 0 else ("<=" if row.get("sms_upper_bound") else "") + str(sms)
        if row.get("sms_copy_kernels"):  # plus CUDA's same-device copy kernels, of unknown size
            label += "+"
        if row.get("sm_fallback"):
            label += "!"
        points.append(
            Point(row["backend"], row["coll"], int(row["size"]), bool(row["in_place"]), row["time_us"],
                  row.get("busbw_GBps"), row.get("wrong"), label, row.get("host_us"), int(row.get("threads", 1))))
    return points


_ROW = re.compile(r"^\s+\d+\s+\d+\s+\S+\s+\S+\s+-?\d+\s")
_THREADS = re.compile(r"^# nThread (\d+) ")


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def read_nccl_tests(lines: Iterable[str], coll: str) -> List[Point]:
    """Rows of one nccl-tests run (`coll`: conccl-bench name). Variants printed as N/A are skipped."""
    points = []
    threads = 1
    for line in lines:
        m = _THREADS.match(line)
        if m:
            threads = int(m.group(1))
        if not _ROW.match(line):
            continue
        cols = line.split()
        if len(cols) < 13:
            continue
        size = int(cols[0])
        for in_place, base in ((False, 5), (True, 9)):
            time_us, busbw = _number(cols[base]), _number(cols[base + 2])
            if time_us is None:
                continue
            wrong = _number(cols[base + 3])
            points.append(Point("nccl-tests", coll, size, in_place, time_us, busbw,
                                None if wrong is None else int(wrong), threads=threads))
    return points


def nccl_tests_coll(filename: str) -> Optional[str]:
    """The collective of an nccl-tests log named like `<stem>_perf*.log` or `nt-<mode>-<stem>.log`."""
    for stem, coll in sorted(NCCL_TESTS_COLL.items(), key=lambda kv: -len(kv[0])):
        if re.search(r"(^|[-_/])" + stem + r"(_perf|\.log|\.txt|$)", filename):
            return coll
    return None


Key = Tuple[str, int, bool]  # coll, size, in_place


def index(points: Iterable[Point], source: str) -> Dict[Key, Point]:
    return {(p.coll, p.size, p.in_place): p for p in points if p.source == source}


def geomean(values: List[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def human_size(size: int) -> str:
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return f"{size}B" if size < 1024 else str(size)


_MARK = re.compile(r"^# nccl-tests: (?:\S*/)?(\w+?)_perf\b")


def read_nccl_tests_file(path: str) -> List[Point]:
    """An nccl-tests log: one run named by its file (`all_gather_perf.log`, `nt-g-alltoall.log`), or several runs
    concatenated, each after a `# nccl-tests: <stem>_perf ...` line (what scripts/gpu.sh sweep writes)."""
    with open(path) as f:
        lines = f.readlines()
    points: List[Point] = []
    coll = nccl_tests_coll(path.rsplit("/", 1)[-1])
    chunk: List[str] = []
    for line in lines + ["# nccl-tests: end_perf\n"]:
        m = _MARK.match(line)
        if not m:
            chunk.append(line)
            continue
        if coll:
            points += read_nccl_tests(chunk, coll)
        chunk = []
        coll = NCCL_TESTS_COLL.get(m.group(1))
    return points


def tag_threads(points: List[Point]) -> List[Point]:
    """When runs with different thread counts are mixed (-g 2 and -t 2 files together), name the threaded ones
    "<source> -t<N>" so that they become their own series; single-mode input is returned unchanged."""
    if len({p.threads for p in points}) > 1:
        for p in points:
            if p.threads > 1:
                p.source = f"{p.source} -t{p.threads}"
    return points


def read_conccl_bench_file(path: str) -> List[Point]:
    with open(path) as f:
        return read_conccl_bench(f)
