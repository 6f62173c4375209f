"""The training benchmark's pure parts: options, MFU arithmetic, statistics, the loss comparison (no torch)."""
import json
import math

import pytest

import bench_config
import compare
import flops
import stats


def test_defaults_and_layers_override():
    c = bench_config.parse(["--layers", "2"], world=8)
    assert c.model == "llama3-8b" and c.shape.n_layers == 2 and c.shape.dim == 4096 and c.shape.n_kv_heads == 8
    assert c.tp == 1 and not c.compile and c.warmup == 3 and c.steps == 30 and c.notes == []
    assert c.shape.head_dim == 128


def test_async_tp_implies_compile_and_sp():
    c = bench_config.parse(["--tp", "2", "--async-tp", "--seq", "1024"], world=4)
    assert c.compile and c.sequence_parallel and c.warmup == 8 and any("--compile" in n for n in c.notes)


@pytest.mark.parametrize("argv, world", [
    (["--tp", "3"], 6),                       # 3 does not divide 8 kv heads
    (["--tp", "2"], 3),                       # nor the world
    (["--sequence-parallel"], 2),             # SP without TP
    (["--tp", "2", "--sequence-parallel", "--seq", "1023"], 4),
    (["--layers", "0"], 2),
    (["--model", "gpt5"], 2),
    (["--backend", "mpi"], 2),
])
def test_bad_options_exit(argv, world):
    with pytest.raises(SystemExit):
        bench_config.parse(argv, world=world)


def test_few_steps_noted():
    assert any("not meaningful" in n for n in bench_config.parse(["--steps", "5"]).notes)


def test_resolve_backend():
    shim = {"LD_PRELOAD": "/x/libfoo.so:/pkg/conccl/lib/libconccl_nccl.so"}
    assert bench_config.resolve_backend("auto", shim) == "conccl"
    assert bench_config.resolve_backend("auto", {}) == "nccl"
    assert bench_config.resolve_backend("auto", {"NCCL_CTA_POLICY": "2"}) == "nccl-zero-cta"
    assert bench_config.resolve_backend("auto", {**shim, "CONCCL_NCCL_SHIM": "0"}) == "nccl"
    with pytest.raises(ValueError):
        bench_config.resolve_backend("conccl", {})
    with pytest.raises(ValueError):
        bench_config.resolve_backend("nccl", shim)


def test_mesh_shape():
    assert bench_config.mesh_shape(8, 2) == {"dp": 4, "tp": 2}
    with pytest.raises(ValueError):
        bench_config.mesh_shape(6, 4)


def test_llama3_parameter_counts():
    # The released models: 8.03B and 70.55B parameters (embedding and output untied).
    s8 = bench_config.ModelShape(**bench_config.SHAPES["llama3-8b"])
    p = flops.param_counts(s8.dim, s8.n_layers, s8.n_heads, s8.n_kv_heads, s8.ffn_dim, s8.vocab)
    assert p["total"] == 8_030_261_248 and p["embedding"] == 128256 * 4096
    assert p["per_layer"] == 4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    s70 = bench_config.ModelShape(**bench_config.SHAPES["llama3-70b"])
    assert flops.param_counts(s70.dim, s70.n_layers, s70.n_heads, s70.n_kv_heads, s70.ffn_dim,
                              s70.vocab)["total"] == 70_553_706_496


def test_flops_and_mfu():
    c = bench_config.parse(["--layers", "2", "--seq", "2048"])
    n = flops.param_counts(4096, 2, 32, 8, 14336, 128256)["matmul"]
    f = flops.flops_per_token_seq(c.shape, 2048)
    assert f == 6 * n + 12 * 2 * 32 * 128 * 2048
    # 8 GPUs, 100k tokens/s: MFU = F * 1e5 / (8 * 989e12)
    assert math.isclose(flops.mfu(f, 1e5, 8), f * 1e5 / (8 * 989e12))
    assert math.isclose(flops.mfu(1e12, 989.0, 1), 1.0)
    with pytest.raises(ValueError):
        flops.mfu(f, 1.0, 0)


def test_step_stats():
    st = stats.step_stats([0.3, 0.1, 0.2, 0.4, 0.5])
    assert st["median"] == 0.3 and st["min"] == 0.1 and st["max"] == 0.5 and st["n"] == 5
    assert math.isclose(st["p10"], 0.14) and math.isclose(st["p90"], 0.46)
    assert stats.step_stats([1.0])["stdev"] == 0.0


def _summary(label, losses, world=2, shared=False, tokens=4096):
    return {"kind": "summary", "label": label, "world": world, "gpus": 1 if shared else world, "tp": 1,
            "shape": {"n_layers": 2}, "seq": 1024, "model": "llama3-8b", "tokens_per_step": tokens, "steps": 3,
            "warmup": 1, "seed": 1, "lr": 3e-4, "performance_figures": not shared,
            "step_time_s": {"median": 0.5, "p10": 0.4, "p90": 0.6}, "tokens_per_s": 8192.0, "mfu": 0.41,
            "peak_mem_gib": {"allocated": 10.0}, "losses": losses, "step_times_s": [0.5, 0.5, 0.5]}


def test_compare_losses():
    ref = [11.0, 10.0, 9.0, 8.0]
    assert compare.compare_losses(ref, [11.0, 10.05, 9.1, 8.1], 2e-2, 1e-3)["ok"]
    r = compare.compare_losses(ref, [11.0, 10.0, 9.5, 8.0], 2e-2, 1e-3)
    assert not r["ok"] and r["worst_step"] == 2
    assert not compare.compare_losses(ref, [11.1, 10.0, 9.0, 8.0], 2e-2, 1e-3)["ok"]  # step 0: 9e-3 > 1e-3
    assert not compare.compare_losses(ref, [11.0, 10.0, 9.0], 2e-2, 1e-3)["ok"]
    assert not compare.compare_losses(ref, [11.0, 10.0, 9.0, float("nan")], 2e-2, 1e-3)["ok"]


def test_check_groups_by_configuration(tmp_path):
    runs = [_summary("nccl-1proc", [11.0, 10.0, 9.0], world=1), _summary("conccl-2proc", [11.0, 10.01, 9.02]),
            _summary("conccl-other", [5.0, 4.0, 3.0], tokens=8192)]
    res = compare.check(runs, "nccl-1proc", 2e-2, 1e-3)
    assert [(r["label"], r["ok"]) for r in res] == [("conccl-2proc", True)]
    f = tmp_path / "a.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in [{"kind": "step", "step": 0}, runs[0], runs[1]]) + "\n")
    assert compare.main([str(f), "--reference", "nccl-1proc"]) == 0
    bad = dict(runs[1], losses=[11.0, 12.0, 13.0], label="broken")
    f.write_text(json.dumps(runs[0]) + "\n" + json.dumps(bad) + "\n")
    assert compare.main([str(f)]) == 1
    (tmp_path / "empty.jsonl").write_text("")
    assert compare.main([str(tmp_path / "empty.jsonl")]) == 2


def test_table_marks_shared_gpu_runs():
    text = stats.format_table([_summary("conccl-2proc", [2.0, 1.0, 0.5], shared=True)])
    assert "500.0 *" in text and "not performance figures" in text and "41.0%" in text
