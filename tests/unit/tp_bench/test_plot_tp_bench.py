"""tools/tp_bench/plot_tp_bench.py on synthetic conccl-tp-bench JSON lines (the plot itself only with matplotlib)."""
import importlib.util
import json
import os
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "..", "tools", "tp_bench", "plot_tp_bench.py")
spec = importlib.util.spec_from_file_location("plot_tp_bench", SCRIPT)
plot_tp_bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_tp_bench)


def row(op, strategy, median, ideal=2.0, serial=3.0, tokens=4096):
    return {"tool": "conccl-tp-bench", "model": "llama3-70b", "op": op, "m": tokens, "n": 3584, "k": 8192, "tp": 8,
            "strategy": strategy, "time_ms": {"median": median, "min": median * 0.9, "max": median * 1.1},
            "ideal_ms": ideal, "time_over_ideal": median / ideal, "speedup_vs_serial_nccl": serial / median}


class PlotTpBenchTest(unittest.TestCase):
    def write(self, rows):
        f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False)
        self.addCleanup(os.unlink, f.name)
        for r in rows:
            f.write(json.dumps(r) + "\n")
        f.write("\n")
        f.close()
        return f.name

    def test_load_keeps_only_rows_with_an_ideal(self):
        path = self.write([row("ag-gemm", "serial-nccl", 3.0), row("ag-gemm", "conccl-fused", 2.2),
                           {"tool": "conccl-tp-bench", "shape": "x", "skipped": "too big"},
                           {"tool": "conccl-tp-bench", "op": "ag-gemm", "strategy": "nccl-split", "error": "boom"},
                           dict(row("ag-gemm", "gemm", 2.0), time_over_ideal=None)])
        rows = plot_tp_bench.load(path)
        self.assertEqual([r["strategy"] for r in rows], ["serial-nccl", "conccl-fused"])

    def test_summary_geomeans(self):
        rows = [row("gemm-rs", "conccl-fused", 2.0, tokens=2048), row("gemm-rs", "conccl-fused", 8.0, ideal=8.0,
                                                                          serial=16.0, tokens=4096)]
        lines = plot_tp_bench.summary(rows)
        fused = [l for l in lines if "conccl-fused" in l]
        self.assertEqual(len(fused), 1)
        self.assertIn("1.000", fused[0])  # time / ideal: 1.0 and 1.0
        self.assertIn("1.732x", fused[0])  # sqrt(1.5 * 2.0)

    def test_plot_writes_a_png(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib is not installed")
        path = self.write([row("ag-gemm", s, t) for s, t in (("serial-nccl", 3.0), ("nccl-split", 2.6),
                                                              ("conccl-fused", 2.2))])
        out = tempfile.NamedTemporaryFile(suffix=".png", delete=False).name
        self.addCleanup(os.unlink, out)
        self.assertEqual(plot_tp_bench.main(["plot_tp_bench.py", path, out]), 0)
        self.assertGreater(os.path.getsize(out), 1000)


if __name__ == "__main__":
    unittest.main()
