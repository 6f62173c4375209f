import io

from conccl import launcher

SHIM = "/pkg/conccl/lib/libconccl_nccl.so"


def test_preload_prepended_to_existing():
    assert launcher.compose_preload(SHIM, None) == SHIM
    assert launcher.compose_preload(SHIM, "") == SHIM
    assert launcher.compose_preload(SHIM, "/a/libx.so") == f"{SHIM}:/a/libx.so"
    # ld.so accepts spaces and colons; the order of the caller's libraries is kept
    assert launcher.compose_preload(SHIM, "/a/libx.so /b/liby.so:/c/libz.so") == f"{SHIM}:/a/libx.so:/b/liby.so:/c/libz.so"


def test_preload_drops_other_copies_of_the_shim():
    existing = f"/old/build/libconccl_nccl.so:/a/libx.so:{SHIM}"
    assert launcher.compose_preload(SHIM, existing) == f"{SHIM}:/a/libx.so"


def test_build_env_sets_real_nccl_unless_given():
    e = launcher.build_env({"PATH": "/bin"}, SHIM, "/nv/libnccl.so.2")
    assert e.env["LD_PRELOAD"] == SHIM and e.env["CONCCL_NCCL_REAL_LIB"] == "/nv/libnccl.so.2"
    assert e.env["PATH"] == "/bin" and e.notes == []
    e = launcher.build_env({"CONCCL_NCCL_REAL_LIB": "/mine.so"}, SHIM, "/nv/libnccl.so.2")
    assert e.env["CONCCL_NCCL_REAL_LIB"] == "/mine.so"
    assert "CONCCL_NCCL_REAL_LIB" not in launcher.build_env({}, SHIM, None).env


def test_build_env_does_not_mutate_base():
    base = {"LD_PRELOAD": "/a.so"}
    launcher.build_env(base, SHIM)
    assert base == {"LD_PRELOAD": "/a.so"}


def test_build_env_warns():
    # Expandable segments work (their pieces are exported to the peers): no warning.
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        assert launcher.build_env({var: "expandable_segments:True"}, SHIM).notes == []
    e = launcher.build_env({"CONCCL_NCCL_SHIM": "0"}, SHIM)
    assert any("real NCCL" in n for n in e.notes)
    # The cudaMallocAsync backend: a note that its memory is staged or bounced (naming the memory it holds), and the
    # setting that moves directly.
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        notes = launcher.build_env({var: "backend:cudaMallocAsync"}, SHIM).notes
        assert len(notes) == 1 and "stages" in notes[0] and "bounce" in notes[0]
        assert "CONCCL_POOL_BOUNCE_MAX_BYTES" in notes[0] and "expandable_segments:True" in notes[0]
    assert launcher.build_env({"PYTORCH_ALLOC_CONF": "backend:native"}, SHIM).notes == []


def test_interpreter_of():
    which = {"python3": "/usr/bin/python3", "torchrun": "/venv/bin/torchrun", "env-script": "/x/env-script",
             "bash": "/bin/bash", "python3.12": "/venv/bin/python3.12"}.get
    lines = {"/venv/bin/torchrun": "#!/venv/bin/python3.12\n", "/x/env-script": "#!/usr/bin/env -S python3 -u\n",
             "/bin/bash": "\x7fELF"}
    read = lambda p: lines.get(p, "")  # noqa: E731
    assert launcher.interpreter_of(["python3", "-m", "torch.distributed.run"], which, read) == "/usr/bin/python3"
    assert launcher.interpreter_of(["torchrun", "--nproc-per-node", "8", "t.py"], which, read) == "/venv/bin/python3.12"
    assert launcher.interpreter_of(["env-script"], which, read) == "/usr/bin/python3"
    assert launcher.interpreter_of(["bash", "-c", "x"], which, read) is None
    assert launcher.interpreter_of([], which, read) is None


def _fake_lib_dir(tmp_path):
    (tmp_path / "libconccl_nccl.so").write_bytes(b"not a library")
    return {"CONCCL_LIB_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}


def test_run_refuses_without_shim(tmp_path):
    err = io.StringIO()
    rc = launcher.run(["true"], environ={"CONCCL_LIB_DIR": str(tmp_path)}, stderr=err)
    assert rc == 2 and err.getvalue().count("\n") == 1 and "no libconccl_nccl.so" in err.getvalue()


def test_run_refuses_on_abi_mismatch(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "shim_abi_version", lambda path: 22809)
    monkeypatch.setattr(launcher, "probe_torch_nccl",
                        lambda py, env, timeout_s=120: {"version": [2, 27, 3], "source": "torch.cuda.nccl.version()"})
    err = io.StringIO()
    rc = launcher.run(["python3", "train.py"], environ=_fake_lib_dir(tmp_path), stderr=err)
    assert rc == 2
    assert err.getvalue().count("\n") == 1 and "NCCL ABI mismatch" in err.getvalue() and "2.27.3" in err.getvalue()


def test_run_refuses_unknown_torch_nccl(tmp_path, monkeypatch):
    monkeypatch.setattr(launcher, "shim_abi_version", lambda path: 22809)
    monkeypatch.setattr(launcher, "probe_torch_nccl", lambda py, env, timeout_s=120: {"error": "No module named torch"})
    err = io.StringIO()
    assert launcher.run(["python3", "x.py"], environ=_fake_lib_dir(tmp_path), stderr=err) == 2
    assert "No module named torch" in err.getvalue()


def test_run_dry_run_matching(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(launcher, "shim_abi_version", lambda path: 22809)
    monkeypatch.setattr(launcher, "probe_torch_nccl", lambda py, env, timeout_s=120: {
        "version": 22805, "path": "/nv/lib/libnccl.so.2", "source": "wheel"})
    env = _fake_lib_dir(tmp_path)
    env["LD_PRELOAD"] = "/a/libx.so"
    assert launcher.run(["python3", "-c", "pass"], environ=env, dry_run=True, stderr=io.StringIO()) == 0
    out = capsys.readouterr().out.splitlines()
    assert f"LD_PRELOAD={tmp_path.resolve()}/libconccl_nccl.so:/a/libx.so" in out
    assert "CONCCL_NCCL_REAL_LIB=/nv/lib/libnccl.so.2" in out
    assert out[-1] == "python3 -c pass"


def test_run_without_abi_check(tmp_path, capsys):
    assert launcher.run(["echo"], environ=_fake_lib_dir(tmp_path), check_abi_flag=False, dry_run=True) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith("LD_PRELOAD=")


def test_shim_abi_version_of_a_non_library(tmp_path):
    p = tmp_path / "libconccl_nccl.so"
    p.write_bytes(b"junk")
    assert launcher.shim_abi_version(str(p)) is None
