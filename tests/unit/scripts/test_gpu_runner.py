"""scripts/gpu.sh, the GPU-machine runner, planned on the CPU (--dry-run): every phase plans without error, and the
multi-process suite's shards cover every shard index exactly once (docs/dev/gpu-runner.md)."""
import os
import re
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def dry_run(*phases, **env):
    """Runs `bash scripts/gpu.sh --dry-run PHASE...` from the repository root with a stage that does not exist (the
    plan then lists the test binaries from the sources); returns (exit status, output)."""
    with tempfile.TemporaryDirectory() as out:
        full_env = dict(os.environ, STAGE=os.path.join(out, "no-stage"), OUT=out, NGPUS="1")
        full_env.update(env)
        proc = subprocess.run(["bash", "scripts/gpu.sh", "--dry-run", *phases], cwd=ROOT, env=full_env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False)
    return proc.returncode, proc.stdout


def phase_names():
    proc = subprocess.run(["bash", "scripts/gpu.sh", "--list"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                          timeout=60, check=True)
    lines = proc.stdout.splitlines()[1:]
    return [line.split()[0] for line in lines if line and not line.startswith(" ") and "GPU" in line]


class GpuRunnerDryRun(unittest.TestCase):
    def test_every_phase_plans(self):
        names = phase_names()
        self.assertIn("tests", names)
        self.assertIn("mp-suite", names)
        for name in names:
            with self.subTest(phase=name):
                rc, out = dry_run(name)
                self.assertEqual(rc, 0, out)
                self.assertIn(name + ":", out)
                self.assertNotIn("command not found", out)
                self.assertNotIn("FAIL(usage)", out)

    def test_mp_suite_runs_every_shard_once(self):
        rc, out = dry_run("mp-suite")
        self.assertEqual(rc, 0, out)
        indices = re.findall(r"GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=(\d+)", out)
        self.assertEqual(sorted(indices), ["0", "1", "2"], out)

    def test_mp_suite_one_shard(self):
        rc, out = dry_run("mp-suite", MP_SHARD="2/4")
        self.assertEqual(rc, 0, out)
        self.assertEqual(re.findall(r"GTEST_TOTAL_SHARDS=(\d+) GTEST_SHARD_INDEX=(\d+)", out), [("4", "1")], out)

    def test_mp_suite_refuses_a_bad_shard(self):
        for bad in ("0/3", "4/3", "x", "1/"):
            with self.subTest(shard=bad):
                _, out = dry_run("mp-suite", MP_SHARD=bad)
                self.assertIn("FAIL(usage)", out)
                self.assertNotIn("GTEST_SHARD_INDEX", out)

    def test_tests_phase_leaves_the_multiprocess_suite_to_mp_suite(self):
        rc, out = dry_run("tests")
        self.assertEqual(rc, 0, out)
        self.assertIn("[SKIP] tests/test_gpu_multiprocess", out)
        self.assertIn("mp-suite", out)


if __name__ == "__main__":
    unittest.main()
