"""The kill verdict of tests/torch/fault_cases.py (a rank or a whole simulated node killed), on result files written
here: what the GPU runs' fault cases conclude must follow from the files, so the verdict is tested on the CPU."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FAULT_CASES = os.path.join(HERE, "..", "torch", "fault_cases.py")
DEAD_PID = 2 ** 22 + 12345  # above Linux's pid_max ceiling: never a live process


def write(d, name, obj):
    with open(os.path.join(d, name), "w") as f:
        json.dump(obj, f)


def node_died(d, world, victims, t_kill=1000.0, raise_ms=None, skip=()):
    """Result files of a job where `victims` killed themselves from t_kill on (2 ms apart) and every other rank raised raise_ms[r] ms
    later (ranks in `skip` wrote nothing)."""
    raise_ms = raise_ms or {}
    order = sorted(victims)
    for r in range(world):
        write(d, f"pid-rank{r}.json", {"pid": DEAD_PID + r, "rank": r})
        if r in victims:
            write(d, f"kill-rank{r}.json", {"t_kill": t_kill + 0.002 * order.index(r), "rank": r, "pid": DEAD_PID + r})
        elif r not in skip:
            ms = raise_ms.get(r, 40.0)
            write(d, f"exc-rank{r}.json", {"rank": r, "t_exc": t_kill + ms / 1e3, "raised_in": "all_reduce 64 MiB",
                                           "exc": "RuntimeError: peer gone"})


def verdict(d, world, *extra):
    p = subprocess.run([sys.executable, FAULT_CASES, "--verdict", "kill", "--result-dir", str(d), "--world",
                        str(world), "--name", "t", "--settle-s", "0", *extra], capture_output=True, text=True,
                       timeout=60)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("CASE ")]
    assert len(lines) == 1, p.stdout + p.stderr
    return p.returncode, lines[0]


def test_node_death_every_survivor_raised(tmp_path):
    node_died(tmp_path, 6, victims={2, 3}, raise_ms={0: 30, 1: 55, 4: 80, 5: 20})
    rc, line = verdict(tmp_path, 6, "--victims", "2,3")
    assert rc == 0 and " PASS " in line
    assert "max 80 ms after the kill" in line and "ranks [2, 3] killed within" in line


def test_latency_counts_from_the_first_kill(tmp_path):
    node_died(tmp_path, 4, victims={2, 3}, raise_ms={0: 900, 1: 1003})
    rc, line = verdict(tmp_path, 4, "--victims", "2,3", "--max-ms", "1000")
    assert rc == 1 and " FAIL " in line and "rank 1 took 1003 ms (> 1000 ms)" in line


def test_a_survivor_without_a_record_fails(tmp_path):
    node_died(tmp_path, 4, victims={3}, skip={1})
    rc, line = verdict(tmp_path, 4)
    assert rc == 1 and "rank 1: neither an exception nor the end of its process was recorded" in line


def test_process_end_counts_when_python_never_raised(tmp_path):
    node_died(tmp_path, 4, victims={3}, skip={1})
    write(tmp_path, "end-rank1.json", {"t_end": 1000.3})
    rc, line = verdict(tmp_path, 4)
    assert rc == 0 and "rank 1: no Python exception recorded; the process ended 300 ms" in line
    rc, line = verdict(tmp_path, 4, "--require-exception")
    assert rc == 1 and "rank 1 never raised in Python" in line


def test_wrong_victims_fail(tmp_path):
    node_died(tmp_path, 4, victims={2})
    rc, line = verdict(tmp_path, 4, "--victims", "2,3")
    assert rc == 1 and "victims [2, 3] expected, kill files from [2]" in line


def test_no_kill_file_fails(tmp_path):
    node_died(tmp_path, 2, victims=set())
    rc, line = verdict(tmp_path, 2)
    assert rc == 1 and "no victim wrote kill-rank<r>.json" in line


@pytest.mark.parametrize("argv, why", [
    (["--victim", "0,1"], "at least one rank left alive"),
    (["--victim", "7"], "ranks of 0..1"),
])
def test_victim_list_is_checked(argv, why):
    sys.path.insert(0, os.path.dirname(FAULT_CASES))
    import fault_cases

    class Args:
        victim_node = None
        sim_nodes = 0
    a = Args()
    a.victim = argv[1]
    with pytest.raises(SystemExit, match=why):
        fault_cases.victim_ranks(a, 2)
    a.victim, a.victim_node, a.sim_nodes = "1", 1, 2
    assert fault_cases.victim_ranks(a, 6) == {2, 3}
    a.victim_node = 3
    with pytest.raises(SystemExit, match="--victim-node 3"):
        fault_cases.victim_ranks(a, 6)
