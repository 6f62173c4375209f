"""The decoder on the CPU (skipped without torch): shapes, GQA, determinism of the synthetic data and of the init."""
import pytest

torch = pytest.importorskip("torch")

import bench_config  # noqa: E402
from model import Transformer, apply_rope, rope_tables, synthetic_batch  # noqa: E402


def test_forward_backward_tiny():
    cfg = bench_config.parse(["--model", "tiny", "--seq", "32"])
    model = Transformer(cfg.shape, cfg.seq)
    model.init_weights(torch.Generator().manual_seed(1))
    x, y = synthetic_batch(cfg.shape.vocab, 32, step=0, seed=1, first=0, count=2, total=2)
    logits = model(x)
    assert logits.shape == (2, 32, cfg.shape.vocab)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_synthetic_batch_is_the_same_whoever_makes_it():
    full = synthetic_batch(256, 16, step=3, seed=7, first=0, count=4, total=4)
    part = synthetic_batch(256, 16, step=3, seed=7, first=2, count=2, total=4)
    assert torch.equal(full[0][2:], part[0]) and torch.equal(full[1][2:], part[1])
    assert torch.equal(full[0][:, 1:], full[1][:, :-1])


def test_rope_preserves_norm():
    cos, sin = rope_tables(8, 5, 10000.0)
    x = torch.randn(1, 5, 2, 8)
    assert torch.allclose(apply_rope(x, cos, sin).norm(dim=-1), x.norm(dim=-1), atol=1e-5)
