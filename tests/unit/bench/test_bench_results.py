"""Readers, summary and table of the bench's Python tools (tools/bench/bench_results.py, sweep_summary.py,
plot_bench.py) on synthetic input. Run: python3 -m unittest discover -s tests/unit/bench -p 'test_*.py'"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools", "bench"))
import bench_results as br  # noqa: E402
import plot_bench  # noqa: E402
import sweep_summary  # noqa: E402

# The shape of nccl-tests' default output (header lines, rows, an N/A in-place variant, the footer).
NCCL_TESTS_TEXT = """\
# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809
# Collective test starting: all_gather_perf
# nThread 1 nGpus 2 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 validation: 1 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             1     float    none      -1    12.50    0.00    0.00      0    12.00    0.00    0.00      0
     1048576        131072     float    none      -1    20.00   52.43   26.21      0    19.00   55.19   27.59    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 13.45
"""


def bench_rows(backend, coll, rows, threads=1):
    """conccl-bench JSON lines: rows = [(size, time_us, busbw, in_place)]."""
    out = [json.dumps({"metadata": True, "tool": "conccl-bench", "threads": threads})]
    for size, time_us, busbw, in_place in rows:
        out.append(json.dumps({"backend": backend, "coll": coll, "size": size, "count": size // 4, "type": "float",
                               "redop": "none", "root": -1, "nranks": 2, "threads": threads, "in_place": in_place,
                               "time_us": time_us, "p50_us": time_us, "p99_us": time_us, "host_us": 4.0,
                               "algbw_GBps": busbw * 2, "busbw_GBps": busbw, "wrong": 0, "sms": 0,
                               "sms_upper_bound": backend == "nccl", "sm_fallback": False, "sms_note": ""}))
    return out


class ReadersTest(unittest.TestCase):
    def test_nccl_tests_rows(self):
        pts = br.read_nccl_tests(NCCL_TESTS_TEXT.splitlines(), "all_gather")
        self.assertEqual(len(pts), 4)
        p = br.index(pts, "nccl-tests")[("all_gather", 1048576, False)]
        self.assertAlmostEqual(p.time_us, 20.0)
        self.assertAlmostEqual(p.busbw, 26.21)
        self.assertEqual(p.wrong, 0)
        self.assertIsNone(br.index(pts, "nccl-tests")[("all_gather", 1048576, True)].wrong)

    def test_nccl_tests_combined_file_and_names(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "nccl-tests-g.txt")
            with open(path, "w") as f:
                f.write("# nccl-tests: all_gather_perf -b 8\n" + NCCL_TESTS_TEXT)
                f.write("# nccl-tests: alltoall_perf -b 8\n" + NCCL_TESTS_TEXT)
            pts = br.read_nccl_tests_file(path)
            self.assertEqual(sorted({p.coll for p in pts}), ["all_gather", "all_to_all"])
            single = os.path.join(d, "reduce_scatter_perf.log")
            with open(single, "w") as f:
                f.write(NCCL_TESTS_TEXT)
            self.assertEqual({p.coll for p in br.read_nccl_tests_file(single)}, {"reduce_scatter"})
        self.assertEqual(br.nccl_tests_coll("nt-t-gather.log"), "gather")
        self.assertEqual(br.nccl_tests_coll("nt-t-all_gather.log"), "all_gather")
        self.assertEqual(br.nccl_tests_coll("all_reduce_perf"), "all_reduce")
        self.assertEqual(br.nccl_tests_coll("reduce_perf.log"), "reduce")

    def test_mixed_thread_modes_become_separate_series(self):
        pts = br.read_conccl_bench(bench_rows("conccl", "all_gather", [(8, 10.0, 0.0, False)]) +
                                   bench_rows("conccl", "all_gather", [(8, 12.0, 0.0, False)], threads=2))
        pts += br.read_nccl_tests(NCCL_TESTS_TEXT.replace("nThread 1", "nThread 2").splitlines(), "all_gather")
        self.assertEqual(pts[-1].threads, 2)
        self.assertEqual(sorted({p.source for p in br.tag_threads(pts)}), ["conccl", "conccl -t2", "nccl-tests -t2"])
        single = br.read_conccl_bench(bench_rows("conccl", "all_gather", [(8, 12.0, 0.0, False)], threads=2))
        self.assertEqual({p.source for p in br.tag_threads(single)}, {"conccl"})

    def test_conccl_bench_rows(self):
        lines = bench_rows("conccl", "all_gather", [(8, 10.0, 0.0, False), (1 << 20, 20.0, 26.0, True)], threads=2)
        lines.append(json.dumps({"backend": "conccl", "coll": "all_to_all", "size": 8, "in_place": True,
                                 "time_us": None, "busbw_GBps": None}))  # skipped variant
        pts = br.read_conccl_bench(lines)
        self.assertEqual(len(pts), 2)
        self.assertEqual(pts[1].threads, 2)
        self.assertEqual(pts[1].host_us, 4.0)
        self.assertEqual(pts[0].sms, "0")
        # Same-device copies (CUDA's copy kernels, size unknown) count as "one SM or more".
        copying = json.loads(bench_rows("conccl", "all_gather", [(1 << 20, 20.0, 26.0, False)])[1])
        copying.update({"sms": 1, "sms_copy_kernels": True, "same_device_copy_bytes": 1 << 19})
        reducing = dict(copying, sms=8, sms_upper_bound=True)
        pts = br.read_conccl_bench([json.dumps(copying), json.dumps(reducing)])
        self.assertEqual([p.sms for p in pts], ["1+", "<=8+"])
        self.assertEqual(br.human_size(64 << 20), "64M")
        self.assertEqual(br.human_size(8), "8B")


class SummaryAndTableTest(unittest.TestCase):
    def setUp(self):
        sizes = [8, 1 << 20, 64 << 20]
        conccl = [(s, t, bw, False) for s, t, bw in zip(sizes, [20.0, 10.0, 200.0], [0.0, 50.0, 300.0])]
        nccl = [(s, t, bw, False) for s, t, bw in zip(sizes, [10.0, 10.0, 300.0], [0.0, 50.0, 200.0])]
        self.points = br.read_conccl_bench(bench_rows("conccl", "all_gather", conccl) +
                                           bench_rows("nccl", "all_gather", nccl))
        self.points += br.read_nccl_tests(NCCL_TESTS_TEXT.splitlines(), "all_gather")

    def test_summary(self):
        lines = sweep_summary.summarize("g", self.points, [p for p in self.points if p.source == "nccl-tests"])
        row = next(line for line in lines if line.startswith("all_gather"))
        cols = row.split()
        # speeds 0.5, 1.0, 1.5: geomean 0.91, min 0.50, 3 points; 8 B is below 0.9x
        self.assertEqual(cols[1:4], ["0.91", "0.50", "3"])
        self.assertIn("300.0/200.0/-", row)
        self.assertTrue(row.endswith("8B"))
        self.assertIn("2/3 points >= 0.9x", lines[-1])

    def test_markdown(self):
        text = plot_bench.markdown(self.points)
        self.assertIn("### all_gather", text)
        self.assertIn("| 8B | 0.0 | 0.0 | 0.0 | **0.50** | 0 | 4.0 / 4.0 |", text)
        self.assertIn("| 1M | 50.0 | 50.0 | 26.2 | 1.00 | 0 | 4.0 / 4.0 |", text)

    def test_main_reads_files(self):
        with tempfile.TemporaryDirectory() as d:
            bench = os.path.join(d, "bench-g.jsonl")
            with open(bench, "w") as f:
                f.write("\n".join(bench_rows("conccl", "all_gather", [(8, 20.0, 0.0, False)]) +
                                  bench_rows("nccl", "all_gather", [(8, 10.0, 0.0, False)])) + "\n")
            out = io.StringIO()
            with redirect_stdout(out):
                sweep_summary.main(["--bench", "g=" + bench, "--bench", "t=" + os.path.join(d, "missing.jsonl")])
            self.assertIn("all_gather", out.getvalue())
            self.assertIn("mode t: no results", out.getvalue())

    @unittest.skipUnless(__import__("importlib").util.find_spec("matplotlib"), "matplotlib not installed")
    def test_plot_writes_png(self):
        with tempfile.TemporaryDirectory() as d:
            png = os.path.join(d, "busbw.png")
            plot_bench.plot(self.points, png)
            with open(png, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


if __name__ == "__main__":
    unittest.main()
