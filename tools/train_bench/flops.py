"""Model FLOPs and MFU of the LLaMA-style decoder (pure arithmetic; unit-tested).

Model FLOPs per token (PaLM, appendix B; torchtitan uses the same):
    F_token = 6 * N + 12 * L * H * Q * T
  N: parameters that take part in matmuls per token = all parameters minus the token embedding (a lookup); the
     output projection counts. 6N = 2N forward + 4N backward (one multiply-add per parameter per token each way).
  12 * L * H * Q * T: attention scores and values (QK^T and AV, forward and backward) for L layers, H query heads of
     Q = head_dim, sequence length T, counted as a full T x T product (the causal half is not subtracted, as in PaLM).
  No activation recomputation is counted (the benchmark recomputes nothing).
MFU = F_token * tokens_per_second / (gpus * peak), peak = 989 TFLOP/s (H200 SXM, bf16 dense, no sparsity).
"""
from __future__ import annotations

from typing import Dict

H200_BF16_DENSE_PEAK = 989e12


def param_counts(dim: int, n_layers: int, n_heads: int, n_kv_heads: int, ffn_dim: int, vocab: int) -> Dict[str, int]:
    head_dim = dim // n_heads
    attn = dim * dim + 2 * dim * (n_kv_heads * head_dim) + dim * dim  # wq, wk, wv (GQA), wo
    mlp = 3 * dim * ffn_dim  # SwiGLU: w1, w3 (gate, up), w2 (down)
    norms = 2 * dim
    layer = attn + mlp + norms
    embedding = vocab * dim
    output = vocab * dim + dim  # projection + final RMSNorm
    total = embedding + n_layers * layer + output
    return {"per_layer": layer, "embedding": embedding, "total": total, "matmul": total - embedding}


def flops_per_token_seq(shape, seq: int) -> float:
    """F_token for a ModelShape-like object (dim, n_layers, n_heads, n_kv_heads, ffn_dim, vocab) at length seq."""
    n = param_counts(shape.dim, shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.ffn_dim, shape.vocab)["matmul"]
    head_dim = shape.dim // shape.n_heads
    return 6.0 * n + 12.0 * shape.n_layers * shape.n_heads * head_dim * seq


def mfu(flops_token: float, tokens_per_s: float, gpus: int, peak: float = H200_BF16_DENSE_PEAK) -> float:
    if gpus < 1 or peak <= 0:
        raise ValueError("gpus >= 1 and peak > 0 needed")
    return flops_token * tokens_per_s / (gpus * peak)
