"""tools/bench/pick_defaults.py on synthetic sweeps: which value wins, ties keep the table's value, only the points
every value measured count, steps that are not knobs are listed, and the printed row.
Run: python3 -m unittest discover -s tests/unit/bench -p 'test_*.py'"""

import io
import json
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools", "bench"))
import pick_defaults as pd  # noqa: E402


def row(tag, coll, size, time_us, in_place=False, backend="conccl"):
    return json.dumps({"tune": tag, "backend": backend, "coll": coll, "size": size, "in_place": in_place,
                       "time_us": time_us})


class PickDefaultsTest(unittest.TestCase):
    def test_knob_of(self):
        self.assertEqual(pd.knob_of("tune-ss262144"), ("singleStreamBytes", 262144))
        self.assertEqual(pd.knob_of("tune-small65536"), ("smallMessageBytes", 65536))
        self.assertEqual(pd.knob_of("tune-lanes1"), ("lanes", 1))
        self.assertEqual(pd.knob_of("tune-mc8388608"), ("minChunkBytes", 8388608))
        self.assertIsNone(pd.knob_of("tune-ctas8"))
        self.assertIsNone(pd.knob_of("tune-push"))

    def test_fastest_value_wins_over_common_points_only(self):
        lines = [
            json.dumps({"tune": "tune-mc1048576", "date": "2026-12-03T10:00:00Z", "colls": ["all_reduce"]}),
            row("tune-mc1048576", "all_reduce", 1 << 20, 10.0),
            row("tune-mc1048576", "all_reduce", 1 << 24, 200.0),
            row("tune-mc8388608", "all_reduce", 1 << 20, 20.0),
            row("tune-mc8388608", "all_reduce", 1 << 24, 400.0),
            # only one value measured this point: it must not count
            row("tune-mc8388608", "all_reduce", 1 << 26, 1.0),
            row("tune-mc8388608", "all_reduce", 1 << 20, 5.0, backend="nccl"),  # not conccl: ignored
            row("tune-ctas8", "all_reduce", 1 << 20, 1.0),
        ]
        times, others, date = pd.read(lines)
        self.assertEqual(date, "2026-12-03T10:00:00Z")
        self.assertEqual(others, ["tune-ctas8"])
        scores, npoints = pd.score(times["minChunkBytes"])
        self.assertEqual(npoints, 2)
        self.assertAlmostEqual(scores[1 << 20], 1.0)
        self.assertAlmostEqual(scores[8 << 20], 2.0)
        out = pd.report(times, others, date, 4, dict(pd.CURRENT), 0.02)
        self.assertIn("minChunkBytes: 1048576 over 2 points", "\n".join(out))
        self.assertIn("lanes: not swept, keeps 2", out)
        self.assertEqual(out[-1], '  {4, 2, 4 * kMiB, 1 * kMiB, 64 * kKiB, "4 GPUs, 2026-12-03: '
                                  'scripts/gpu.sh tune sweep (docs/results/...)"},')

    def test_a_tie_keeps_the_current_value(self):
        lines = [row("tune-lanes1", "all_gather", 1 << 20, 99.0), row("tune-lanes2", "all_gather", 1 << 20, 100.0)]
        times, _, _ = pd.read(lines)
        scores, _ = pd.score(times["lanes"])
        self.assertEqual(pd.pick(scores, current=2, tie=0.02), 2)  # 1% apart: noise, keep the table's 2
        self.assertEqual(pd.pick(scores, current=2, tie=0.0), 1)
        lines = [row("tune-lanes1", "all_gather", 1 << 20, 50.0), row("tune-lanes2", "all_gather", 1 << 20, 100.0)]
        times, _, _ = pd.read(lines)
        scores, _ = pd.score(times["lanes"])
        self.assertEqual(pd.pick(scores, current=2, tie=0.02), 1)

    def test_main_prints_the_row_and_refuses_an_empty_sweep(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "tune.jsonl")
            with open(path, "w") as f:
                f.write("\n".join([row("tune-small16384", "all_reduce", 4096, 30.0),
                                   row("tune-small65536", "all_reduce", 4096, 10.0)]) + "\n")
            buf = io.StringIO()
            with redirect_stdout(buf):
                self.assertEqual(pd.main(["--gpus", "8", "--current", "lanes=1", path]), 0)
            text = buf.getvalue()
            self.assertIn("smallMessageBytes: 65536 over 1 points", text)
            self.assertIn("{8, 1, 4 * kMiB, 8 * kMiB, 64 * kKiB,", text)
            empty = os.path.join(d, "empty.jsonl")
            with open(empty, "w") as f:
                f.write(row("tune-push", "reduce", 1 << 20, 5.0) + "\n")
            self.assertEqual(pd.main(["--gpus", "2", empty]), 1)
        with self.assertRaises(SystemExit):
            pd.parse_current("lanes=two")


if __name__ == "__main__":
    unittest.main()
