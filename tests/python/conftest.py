"""Paths for the Python tests: the installed conccl package if there is one (scripts/test.sh installs it into a venv,
with its libraries), else the sources in python/; the training benchmark's modules from tools/train_bench/."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "train_bench"))
try:
    import conccl  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))
