"""A LLaMA-style decoder: RMSNorm, rotary attention with grouped-query heads, SwiGLU MLP (the structure of Meta's
LLaMA-3 reference model.py, written for FSDP2 and PyTorch's tensor parallelism: the attention reads its local head
counts from the projections' outputs, so a column-parallel wq/wk/wv simply gives each TP rank fewer heads)."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # In fp32 (as the reference does), back to the input's dtype.
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope_tables(head_dim: int, seq: int, theta: float, device=None):
    """cos, sin of shape [seq, head_dim/2] (fp32): rotation angle t / theta^(2i/head_dim) of pair i at position t."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):
    """x [b, t, h, d]: rotates the (even, odd) pairs of the last dimension, as LLaMA's complex multiplication."""
    xf = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xf[..., 0], xf[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1)
    return out.flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        # -1: the heads of this TP rank (all of them without TP).
        q = self.wq(x).view(b, t, -1, self.head_dim)
        k = self.wk(x).view(b, t, -1, self.head_dim)
        v = self.wv(x).view(b, t, -1, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))  # [b, heads, t, d]
        rep = q.shape[1] // k.shape[1]
        if rep > 1:  # GQA: each key/value head serves `rep` query heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)  # gate
        self.w3 = nn.Linear(dim, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, dim, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, shape):
        super().__init__()
        self.attention_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.attention = Attention(shape.dim, shape.n_heads, shape.n_kv_heads)
        self.ffn_norm = RMSNorm(shape.dim, shape.norm_eps)
        self.feed_forward = FeedForward(shape.dim, shape.ffn_dim)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, shape, seq: int):
        super().__init__()
        self.shape = shape
        self.tok_embeddings = nn.Embedding(shape.vocab, shape.dim)
        self.layers = nn.ModuleList(Block(shape) for _ in range(shape.n_layers))
        self.norm = RMSNorm(shape.dim, shape.norm_eps)
        self.output = nn.Linear(shape.dim, shape.vocab, bias=False)
        cos, sin = rope_tables(shape.dim // shape.n_heads, seq, shape.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    @torch.no_grad()
    def init_weights(self, generator: torch.Generator):
        """Deterministic from `generator` (same values on every rank and every backend): normal(0, 0.02) for the
        embedding and input projections, scaled by 1/sqrt(2 * layers) for the two output projections of each block
        (GPT-2 / torchtitan style), ones for the norms."""
        std_out = 0.02 / math.sqrt(2 * self.shape.n_layers)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(("wo.weight", "w2.weight")):
                p.normal_(0.0, std_out, generator=generator)
            else:
                p.normal_(0.0, 0.02, generator=generator)

    def forward(self, tokens):
        t = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))


def synthetic_batch(vocab: int, seq: int, step: int, seed: int, first: int, count: int, total: int,
                    period: int = 16, noise: float = 0.05):
    """Sequences [first, first+count) of step `step`'s global batch of `total` (CPU tensors, int64; the same bytes
    whichever rank makes them). Each sequence repeats a random motif of `period` tokens with `noise` of its tokens
    replaced at random: after the first period the next token is predictable (induction), so the loss falls."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    motif = torch.randint(0, vocab, (total, period), generator=g)
    reps = (seq + 1 + period - 1) // period
    seqs = motif.repeat(1, reps)[:, : seq + 1]
    rand = torch.randint(0, vocab, (total, seq + 1), generator=g)
    mask = torch.rand(total, seq + 1, generator=g) < noise
    seqs = torch.where(mask, rand, seqs)[first:first + count]
    return seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous()
