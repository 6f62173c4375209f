"""Step-time statistics, the JSON records and the table of the training benchmark (pure Python, unit-tested)."""
from __future__ import annotations

import json
import statistics
from typing import Dict, Iterable, List, Sequence


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of an already sorted, non-empty sequence."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def step_stats(times_s: Sequence[float]) -> Dict[str, float]:
    """median, p10, p90, min, max, mean, stdev (seconds) of the measured steps."""
    s = sorted(times_s)
    return {"n": len(s), "median": statistics.median(s), "p10": percentile(s, 10), "p90": percentile(s, 90),
            "min": s[0], "max": s[-1], "mean": statistics.fmean(s),
            "stdev": statistics.stdev(s) if len(s) > 1 else 0.0}


def read_records(lines: Iterable[str]) -> List[Dict]:
    out = []
    for line in lines:
        line = line.strip()
        if line:
            out.append(json.loads(line))
    return out


def summaries(records: Iterable[Dict]) -> List[Dict]:
    return [r for r in records if r.get("kind") == "summary"]


TABLE_COLUMNS = ("label", "world", "gpus", "tp", "layers", "seq", "step ms (p50)", "p10-p90 ms", "tokens/s", "MFU",
                 "peak GiB", "loss first->last")


def table_rows(runs: Iterable[Dict]) -> List[List[str]]:
    rows = []
    for r in runs:
        st = r["step_time_s"]
        flag = "" if r.get("performance_figures", True) else " *"
        rows.append([r["label"], str(r["world"]), str(r["gpus"]), str(r["tp"]), str(r["shape"]["n_layers"]),
                     str(r["seq"]), f"{st['median'] * 1e3:.1f}{flag}", f"{st['p10'] * 1e3:.1f}-{st['p90'] * 1e3:.1f}",
                     f"{r['tokens_per_s']:.0f}", f"{100 * r['mfu']:.1f}%", f"{r['peak_mem_gib']['allocated']:.1f}",
                     f"{r['losses'][0]:.4f}->{r['losses'][-1]:.4f}"])
    return rows


def format_table(runs: Sequence[Dict]) -> str:
    rows = table_rows(runs)
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(TABLE_COLUMNS)]
    line = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    out = [line(TABLE_COLUMNS), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    if any(not r.get("performance_figures", True) for r in runs):
        out.append("* ranks share a GPU (world size > GPUs): step times are not performance figures")
    return "\n".join(out)
