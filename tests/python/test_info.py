import os
import subprocess
import sys

from conccl import info, routing


class FakeCuda:
    """The driver API as a machine without a usable GPU answers it."""

    def __init__(self, init_rc=100, count=0):
        self.init_rc, self.count = init_rc, count

    def cuInit(self, flags):
        return self.init_rc

    def cuDriverGetVersion(self, out):
        out._obj.value = 13000
        return 0

    def cuDeviceGetCount(self, out):
        out._obj.value = self.count
        return 0


def test_no_driver_no_device():
    r = info.gpu_report(cuda=FakeCuda(init_rc=100))
    assert r["gpus"] == [] and "cuInit failed" in r["error"]
    r = info.gpu_report(cuda=FakeCuda(init_rc=0, count=0))
    assert r["gpus"] == [] and r["error"] == "no GPU visible" and r["driver"] == "CUDA 13.0"


def test_render_without_gpu_says_no_gpu():
    rep = info.collect(environ={"CONCCL_LIB_DIR": "/nonexistent"}, probe_torch=False, cuda=FakeCuda())
    text = "\n".join(info.render(rep))
    assert "GPUs: no GPU" in text
    assert "nccl_shim: not built" in text
    assert "-> conccl" in text and "communicators under `conccl run`" in text


def test_cli_info_runs_here():
    # Whatever this machine has (CI: no GPU, maybe no driver): exit 0 and a GPU line.
    env = dict(os.environ)
    import conccl

    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(conccl.__file__)) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "conccl", "info", "--no-torch"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("GPUs: ")
    r = subprocess.run([sys.executable, "-m", "conccl", "info", "--json", "--no-torch"], capture_output=True,
                       text=True, env=env, timeout=120)
    assert r.returncode == 0 and '"routing"' in r.stdout


def test_peer_matrix():
    peer = [[None, True, False], [True, None, True], [False, True, None]]
    nv = [[None, True, None], [True, None, False], [None, False, None]]
    lines = info.peer_matrix_lines(peer, nv)
    assert lines[1].split() == ["GPU0", "X", "NV", "-"]
    assert lines[2].split() == ["GPU1", "NV", "X", "P"]


def test_routing_rule():
    assert routing.decide({})[0] == "conccl"
    assert routing.decide({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"})[0] == "conccl"
    path, why = routing.decide({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"})
    assert path == "NCCL" and "WORLD_SIZE=16 != LOCAL_WORLD_SIZE=8" in why
    assert routing.decide({"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"})[0] == "NCCL"
    assert routing.decide({"SLURM_NNODES": "2"})[0] == "NCCL"
    assert routing.decide({"SLURM_NNODES": "1"})[0] == "conccl"
    assert routing.decide({"CONCCL_NCCL_SHIM": "0"}) == ("NCCL", "CONCCL_NCCL_SHIM=0")
    assert routing.decide({"CONCCL_NCCL_SHIM": " 1 "})[0] == "conccl"
    assert "neither 0 nor 1" in routing.decide({"CONCCL_NCCL_SHIM": "yes"})[1]
    assert routing.decide({"WORLD_SIZE": "x", "LOCAL_WORLD_SIZE": "8"})[0] == "conccl"  # unparsable: not multi-node
    assert routing.collectives({"CONCCL_NCCL_COLLS": "all_gather,reduce_scatter"}) == "all_gather,reduce_scatter"
