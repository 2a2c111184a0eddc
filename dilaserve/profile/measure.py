"""Measured latency profiles: time real (tensor-parallel) steps of the served model.

A TP-``d`` instance is ``d`` ranks (processes) joined by ``torch.distributed``: on CPU each
rank gets ``threads_per_rank`` threads, so a rank plays the part of one GPU. For each TP
degree the ranks time

* recompute steps: full passes over ``n / seq_len`` requests of ``seq_len`` tokens
  (x-axis: tokens in the batch, ``n``);
* cache steps: ``n / block_length`` requests feeding one block each and attending to a
  cached context of ``seq_len`` tokens (x-axis: fed tokens, ``n``, as docs/architecture.md section 5
  reads ``LP[tp][B x n_reqs]``).

Each point is the median of ``repeats`` timed steps after one warm-up step.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from dilaserve.model.native import NativeDiffusionLM
from dilaserve.model.tensor_parallel import TPWorker, rank_device, run_tp
from dilaserve.profile.types import LatencyProfile, StepCurve


@dataclass(frozen=True)
class MeasureConfig:
    """What to time.

    Attributes:
        tp_degrees: TP degrees to measure; each must divide the model's heads and MLP width.
        recompute_tokens: batch sizes in tokens for recompute steps (multiples of seq_len
            above seq_len).
        cache_tokens: fed tokens for cache steps (multiples of block_length).
        seq_len: tokens per request (prompt + canvas); at most the model's context.
        block_length: tokens per block in cache steps.
        repeats: timed steps per point (the median is kept).
        threads_per_rank: CPU threads per rank (one rank stands for one GPU).
    """

    tp_degrees: tuple[int, ...] = (1, 2)
    recompute_tokens: tuple[int, ...] = (64, 128, 256, 512, 1024, 2048)
    cache_tokens: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    seq_len: int = 128
    block_length: int = 32
    repeats: int = 5
    threads_per_rank: int = 1

    def __post_init__(self) -> None:
        if not self.tp_degrees or any(d < 1 for d in self.tp_degrees):
            raise ValueError(f"tp_degrees={self.tp_degrees}: list positive TP degrees, e.g. (1, 2)")
        if any(n % self.block_length for n in self.cache_tokens):
            raise ValueError(f"cache_tokens {self.cache_tokens} must be multiples of block_length {self.block_length}")
        if any(n > self.seq_len and n % self.seq_len for n in self.recompute_tokens):
            raise ValueError(
                f"recompute_tokens {self.recompute_tokens} above seq_len must be multiples of {self.seq_len}"
            )
        if self.block_length > self.seq_len or self.repeats < 1:
            raise ValueError("need block_length <= seq_len and repeats >= 1")


def _timed(fn: Callable[[], object], repeats: int, device: str) -> float:
    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if dist.is_initialized():
            dist.barrier()  # every rank starts the step together, as a real TP instance does

    fn()  # warm-up
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.no_grad()
def _measure_rank(rank: int, world_size: int, checkpoint: str, device: str, cfg: MeasureConfig) -> dict:
    threads = torch.get_num_threads()  # TP-1 runs in the caller's process: restore its pool after
    try:
        return _measure_steps(
            TPWorker(checkpoint, rank, world_size, device, cfg.threads_per_rank).load(), rank, device, cfg
        )
    finally:
        torch.set_num_threads(threads)


def _block_causal(model) -> bool:
    return bool(getattr(model.config, "block_causal", False)) and not isinstance(model, NativeDiffusionLM)


def _measure_steps(model, rank: int, device: str, cfg: MeasureConfig) -> dict:
    dev = rank_device(device, rank)
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    rec, cache = [], []
    for n in cfg.recompute_tokens:
        b, t = (n // cfg.seq_len, cfg.seq_len) if n >= cfg.seq_len else (1, n)
        ids = torch.randint(3, vocab, (b, t), generator=gen).to(dev)
        # the engine's recompute: a prompt isolated from the response (its per-query mask is what costs);
        # the native LLaDA / Dream modules attend bidirectionally and run their head on the current block only
        if isinstance(model, NativeDiffusionLM):
            kw = {"logit_positions": torch.arange(min(cfg.block_length, t), device=dev).expand(b, -1)}
        else:
            kw = {"prompt_lengths": torch.full((b,), t // 4, device=dev)}
        rec.append((n, _timed(lambda: model(ids, return_kv=True, **kw), cfg.repeats, dev)))
    S, Lb = cfg.seq_len, cfg.block_length
    for n in cfg.cache_tokens:
        b = n // Lb
        # K/V of this rank's (K/V) heads only: what its cache would hold after a recompute step.
        attn = model.layers[0].attn
        heads, hd = getattr(attn, "n_kv_head", attn.n_head), attn.head_dim
        past = [
            (torch.randn(b, heads, S, hd, generator=gen).to(dev), torch.randn(b, heads, S, hd, generator=gen).to(dev))
            for _ in model.layers
        ]
        past_mask = torch.ones(b, S, dtype=torch.bool)
        ids = torch.randint(3, vocab, (b, Lb), generator=gen).to(dev)
        pos = torch.arange(S - Lb, S).expand(b, Lb).to(dev)
        ones = torch.ones(b, Lb, dtype=torch.bool, device=dev)
        # A block-causal cache step counts each key's block from the prompt's end: it needs
        # the prompt length (the recompute pass's, so the block sees the prompt and earlier blocks).
        block_kw = {"prompt_lengths": torch.full((b,), S // 4, device=dev)} if _block_causal(model) else {}
        step = lambda: model(  # noqa: E731
            ids, attention_mask=ones, position_ids=pos, past_kv=past, past_mask=past_mask.to(dev), **block_kw
        )
        cache.append((n, _timed(step, cfg.repeats, dev)))
    return {"recompute": rec, "cache": cache}


def measure_profile(
    checkpoint: str | Path,
    cfg: MeasureConfig = MeasureConfig(),
    device: str = "cpu",
    name: str | None = None,
    log: Callable[[str], None] | None = None,
) -> LatencyProfile:
    """Time every TP degree of ``cfg`` and return their curves as one :class:`LatencyProfile`."""
    recompute, cache = {}, {}
    for d in cfg.tp_degrees:
        t0 = time.perf_counter()
        out = run_tp(_measure_rank, d, str(checkpoint), device, cfg, device=device)
        recompute[d] = StepCurve.from_points(out["recompute"])
        cache[d] = StepCurve.from_points(out["cache"])
        if log:
            log(
                f"TP-{d}: measured {len(out['recompute']) + len(out['cache'])} points in {time.perf_counter() - t0:.1f} s"
            )
    meta = {
        "kind": "measured",
        "checkpoint": str(checkpoint),
        "device": device,
        "host": platform.node(),
        "torch": torch.__version__,
        "config": asdict(cfg),
        "x_axis": {
            "recompute": "tokens in the batch (requests x seq_len)",
            "cache": "fed tokens (requests x block_length)",
        },
    }
    return LatencyProfile(name=name or f"{Path(checkpoint).name}-{device}", recompute=recompute, cache=cache, meta=meta)
