#!/usr/bin/env python3
"""Fails when an #include runs up the layers (README, "How it is built"): src/base includes no other layer,
src/sched only base, src/exec only base, sched and exec itself. Run from anywhere; prints each offending line."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
# layer -> the project directories its files may include from
ALLOWED = {
    "base": {"base"},
    "sched": {"base", "sched"},
    "exec": {"base", "sched", "exec"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')

bad = []
for layer, allowed in ALLOWED.items():
    for path in sorted((SRC / layer).rglob("*")):
        if path.suffix not in {".h", ".cc", ".cu", ".cuh", ".in"}:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1) not in allowed:
                bad.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()} ({layer} may include only "
                           f"{', '.join(sorted(allowed))})")
for b in bad:
    print(b)
print(f"check_layers: {len(bad)} include(s) running up the layers" if bad else "check_layers: every include points down")
sys.exit(1 if bad else 0)
