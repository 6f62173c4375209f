"""Options of the training benchmark and the LLaMA-3 shapes: pure Python (no torch), unit-tested on the CPU."""
from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

# The layer shapes of Meta's LLaMA-3 (params.json of the released checkpoints): dim, layers, query heads, key/value
# heads (GQA), SwiGLU hidden size, vocabulary, RoPE theta, RMSNorm epsilon.
SHAPES: Dict[str, Dict] = {
    "llama3-8b": dict(dim=4096, n_layers=32, n_heads=32, n_kv_heads=8, ffn_dim=14336, vocab=128256,
                      rope_theta=500000.0, norm_eps=1e-5),
    "llama3-70b": dict(dim=8192, n_layers=80, n_heads=64, n_kv_heads=8, ffn_dim=28672, vocab=128256,
                       rope_theta=500000.0, norm_eps=1e-5),
    # For the CPU tests and quick checks: the same structure, tiny.
    "tiny": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=192, vocab=256, rope_theta=10000.0,
                 norm_eps=1e-5),
}

BACKENDS = ("auto", "nccl", "nccl-zero-cta", "conccl")
MIN_MEASURED_STEPS = 20


@dataclass
class ModelShape:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    vocab: int
    rope_theta: float
    norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


@dataclass
class BenchConfig:
    model: str
    shape: ModelShape
    seq: int
    batch: int  # sequences per data-parallel rank per step
    steps: int
    warmup: int
    tp: int
    async_tp: bool
    sequence_parallel: bool
    compile: bool
    lr: float
    seed: int
    backend: str  # requested: auto (read LD_PRELOAD), nccl, nccl-zero-cta, conccl
    out: Optional[str]
    label: Optional[str]
    progress_every: int
    timeout_s: int
    notes: List[str] = field(default_factory=list)

    def to_dict(self) -> Dict:
        d = asdict(self)
        d["shape"] = asdict(self.shape)
        return d


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="train_bench.py", description="LLaMA-style FSDP2 (+TP) training benchmark: one backend per run.")
    p.add_argument("--model", default="llama3-8b", choices=sorted(SHAPES), help="layer shapes (default llama3-8b)")
    p.add_argument("--layers", type=int, help="override the number of decoder blocks (e.g. 2 for a quick run)")
    p.add_argument("--seq", type=int, default=2048, help="sequence length")
    p.add_argument("--batch", type=int, default=1, help="sequences per data-parallel rank per step")
    p.add_argument("--steps", type=int, default=30, help="steps measured after the warm-up")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps, not timed (default 3; 8 with --compile)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (2-D mesh dp x tp; 1: FSDP2 only)")
    p.add_argument("--sequence-parallel", action="store_true", help="TP with sequence parallelism (norms sharded)")
    p.add_argument("--async-tp", action="store_true",
                   help="async TP (inductor micro-pipelining; implies --compile and --sequence-parallel)")
    p.add_argument("--compile", action="store_true", help="torch.compile each block")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="what the NCCL process group runs on; auto: conccl when the drop-in is in LD_PRELOAD "
                        "(conccl run), else nccl. nccl-zero-cta asks NCCL for NCCL_CTA_POLICY_ZERO")
    p.add_argument("--label", help="name of this run in the outputs (default: the backend)")
    p.add_argument("--out", help="JSON-lines file to append this run's records to (rank 0)")
    p.add_argument("--progress-every", type=int, default=1, help="a progress line on stderr every N steps (0: none)")
    p.add_argument("--timeout-s", type=int, default=600, help="process-group timeout")
    return p


def parse(argv: Optional[Sequence[str]] = None, world: Optional[int] = None) -> BenchConfig:
    """Parses and checks the options; `world`: the job's size when known (checks the mesh and the head split)."""
    p = parser()
    a = p.parse_args(argv)
    shape = dict(SHAPES[a.model])
    if a.layers is not None:
        if a.layers < 1:
            p.error("--layers must be >= 1")
        shape["n_layers"] = a.layers
    s = ModelShape(**shape)
    if a.seq < 2 or a.batch < 1 or a.steps < 1:
        p.error("--seq >= 2, --batch >= 1 and --steps >= 1 are needed")
    notes = []
    compile_ = a.compile or a.async_tp
    sp = a.sequence_parallel or a.async_tp
    if a.async_tp and not a.compile:
        notes.append("--async-tp turns on --compile (inductor does the micro-pipelining)")
    if a.tp < 1:
        p.error("--tp must be >= 1")
    if a.tp > 1:
        for name, value in (("heads", s.n_heads), ("kv heads", s.n_kv_heads), ("ffn dim", s.ffn_dim)):
            if value % a.tp:
                p.error(f"--tp {a.tp} does not divide the model's {name} ({value})")
        if sp and a.seq % a.tp:
            p.error(f"sequence parallelism needs --seq divisible by --tp ({a.seq} % {a.tp})")
    elif sp:
        p.error("--sequence-parallel / --async-tp need --tp > 1")
    if world is not None and world % a.tp:
        p.error(f"--tp {a.tp} does not divide the world size {world}")
    warmup = a.warmup if a.warmup is not None else (8 if compile_ else 3)
    if a.steps < MIN_MEASURED_STEPS:
        notes.append(f"only {a.steps} measured steps (< {MIN_MEASURED_STEPS}): the spread is not meaningful")
    return BenchConfig(model=a.model, shape=s, seq=a.seq, batch=a.batch, steps=a.steps, warmup=warmup, tp=a.tp,
                       async_tp=a.async_tp, sequence_parallel=sp, compile=compile_, lr=a.lr, seed=a.seed,
                       backend=a.backend, out=a.out, label=a.label, progress_every=a.progress_every,
                       timeout_s=a.timeout_s, notes=notes)


def resolve_backend(requested: str, environ: Mapping[str, str]) -> str:
    """The backend a run is on: as requested, or for auto: conccl when the drop-in is preloaded (conccl run sets
    LD_PRELOAD), nccl-zero-cta when NCCL_CTA_POLICY=2 is set, else nccl. Refuses a contradiction (conccl requested
    without the drop-in, or nccl with it), since the labels of a comparison must be true."""
    preloaded = any(os.path.basename(p) == "libconccl_nccl.so"
                    for p in environ.get("LD_PRELOAD", "").replace(" ", ":").split(":"))
    shim_on = preloaded and environ.get("CONCCL_NCCL_SHIM", "1").strip() == "1"
    if requested == "auto":
        if shim_on:
            return "conccl"
        return "nccl-zero-cta" if environ.get("NCCL_CTA_POLICY", "").strip() == "2" else "nccl"
    if requested == "conccl" and not shim_on:
        raise ValueError("--backend conccl but the conccl drop-in is not preloaded (start with `conccl run`)")
    if requested != "conccl" and shim_on:
        raise ValueError(f"--backend {requested} but the conccl drop-in is preloaded (LD_PRELOAD)")
    return requested


def mesh_shape(world: int, tp: int) -> Dict[str, int]:
    """dp x tp: FSDP2 shards over dp, TP inside each dp group of tp consecutive ranks (the fast links)."""
    if tp < 1 or world % tp:
        raise ValueError(f"tp {tp} does not divide world {world}")
    return {"dp": world // tp, "tp": tp}
