"""Analytic latency profiles for real checkpoints on real GPUs (a calibrated roofline).

For a TP-``tp`` instance and ``n`` tokens in the batch, one denoising step costs

    roofline = max(FLOPs / (peak * compute_eff), bytes / (hbm * memory_eff)) / (tp * scaling[tp])
    comm     = 2 * layers * (allreduce_latency + 2 (tp-1)/tp * n * hidden * act_bytes / (link * link_eff))
    latency  = roofline + comm + step_overhead

* FLOPs: 2 x parameters per token plus attention (4 x layers x hidden x n x context);
* bytes: the weights plus K/V traffic (a recompute step writes every token's K/V, a cache
  step reads each request's whole context);
* recompute steps hold ``n / context`` requests, cache steps feed ``n / block`` requests
  (one block each) that attend to ``context`` cached tokens.

**Block mode** (``block_causal=True``, profiles named ``<model>-<gpu>-block``): the same
model served as block diffusion (docs/architecture.md, "Block diffusion"). A block step is
a cache-step pass over the fed tokens (one block per request; two where it appends the
block just finished) whose attention reads the block-causal context, on average the prompt
and half the answer (``context - answer_tokens / 2``) rather than the whole canvas; the
prefill is a recompute pass over prompt + finished blocks whose attention is causal across
blocks (half the square). Weights, efficiencies and the TP calibration are the same, so the
two modes differ only by what the steps attend to.

``scaling[tp]`` is the only fitted quantity: how well the sharded matmuls scale beyond the
ideal ``1/tp`` once kernels shrink. It is solved in closed form so that, at the
calibration point, TP-2 cuts step latency by 25% and TP-4 by 55% against TP-1 (the
source paper's measurements); TP-8 continues the TP-2 -> TP-4 trend geometrically. Every
other number is a stated hardware or model constant in :data:`MODELS`, :data:`GPUS` and
:data:`ROOFLINE`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np

from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile, StepCurve


@dataclass(frozen=True)
class ModelSpec:
    """Size of a transformer as the roofline needs it (bf16 weights and K/V)."""

    name: str
    params: float  # weights read every step, and 2 FLOPs per weight per token
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    bytes_per_value: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.params * self.bytes_per_value

    @property
    def kv_bytes_per_token(self) -> float:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_value


@dataclass(frozen=True)
class GPUSpec:
    name: str
    peak_flops: float  # dense bf16 FLOP/s
    hbm_bytes_s: float  # HBM bandwidth, bytes/s
    link_bytes_s: float  # NVLink bandwidth per GPU per direction, bytes/s


@dataclass(frozen=True)
class RooflineParams:
    """Efficiency factors, workload shape and calibration targets (all in one place).

    Attributes:
        compute_eff / memory_eff / link_eff: achieved share of peak FLOP/s, HBM and NVLink.
        allreduce_latency_s: fixed cost of one all-reduce (launch + synchronisation).
        step_overhead_s: per-step host overhead (scheduling, sampling, launch).
        context: tokens per request (prompt + canvas); GSM8K-like default 1020 + 256.
        answer_tokens: of those, the answer canvas (block mode: a block step attends to the
            prompt and the finished blocks, on average half the answer).
        block_length: tokens fed per request by a cache step.
        calibration_tokens: recompute-step batch (tokens) at which targets must hold.
        targets: latency at TP-d over TP-1 at the calibration point.
    """

    compute_eff: float = 0.6
    memory_eff: float = 0.8
    link_eff: float = 0.7
    allreduce_latency_s: float = 10e-6
    step_overhead_s: float = 2e-3
    context: int = 1276
    answer_tokens: int = 256
    block_length: int = 32
    calibration_tokens: int = 8 * 1276
    targets: Mapping[int, float] = field(default_factory=lambda: {2: 0.75, 4: 0.45})


MODELS: dict[str, ModelSpec] = {
    # LLaDA-8B: 32 layers, d=4096, 32 heads with full multi-head K/V, ~8.0B weights.
    "llada-8b": ModelSpec("llada-8b", params=8.02e9, layers=32, hidden=4096, kv_heads=32, head_dim=128),
    # Dream-7B (Qwen2.5-7B layout): 28 layers, d=3584, grouped K/V with 4 heads, ~7.6B weights.
    "dream-7b": ModelSpec("dream-7b", params=7.62e9, layers=28, hidden=3584, kv_heads=4, head_dim=128),
}

GPUS: dict[str, GPUSpec] = {
    "h100": GPUSpec("h100", peak_flops=989e12, hbm_bytes_s=3.35e12, link_bytes_s=450e9),  # SXM5 80 GB
    "a100": GPUSpec("a100", peak_flops=312e12, hbm_bytes_s=2.039e12, link_bytes_s=300e9),  # SXM4 80 GB
}

ROOFLINE = RooflineParams()

#: Token grids of the stored curves (tokens in the batch).
RECOMPUTE_GRID = tuple(int(x) for x in np.geomspace(256, 131072, 19).round())
CACHE_GRID = tuple(32 * 2**i for i in range(10))  # 32 .. 16384


def attended_context(p: RooflineParams, kind: StepKind, block_causal: bool) -> float:
    """Mean tokens one fed token attends to: the whole canvas (bidirectional); in block mode
    the block-causal context of a block step (prompt + on average half the answer), or half
    of a prefill's (causal across blocks)."""
    if not block_causal:
        return float(p.context)
    causal = p.context - p.answer_tokens / 2
    return causal / 2 if kind is StepKind.RECOMPUTE else causal


def _roofline_tp1(
    model: ModelSpec, gpu: GPUSpec, p: RooflineParams, n: float, kind: StepKind, block_causal: bool = False
) -> float:
    ctx = attended_context(p, kind, block_causal)
    attn_flops = 4 * model.layers * model.hidden * n * ctx
    flops = 2 * model.params * n + attn_flops
    if kind is StepKind.RECOMPUTE:
        kv = n * model.kv_bytes_per_token  # every token's K/V written for the cache
    else:
        kv = (n / p.block_length) * ctx * model.kv_bytes_per_token  # each request reads its context
    compute = flops / (gpu.peak_flops * p.compute_eff)
    memory = (model.weight_bytes + kv) / (gpu.hbm_bytes_s * p.memory_eff)
    return max(compute, memory)


def _allreduce(model: ModelSpec, gpu: GPUSpec, p: RooflineParams, n: float, tp: int) -> float:
    if tp == 1:
        return 0.0
    payload = n * model.hidden * model.bytes_per_value
    one = p.allreduce_latency_s + 2 * (tp - 1) / tp * payload / (gpu.link_bytes_s * p.link_eff)
    return 2 * model.layers * one  # after attention and after the MLP of every layer


def calibrate(
    model: ModelSpec, gpu: GPUSpec, p: RooflineParams = ROOFLINE, block_causal: bool = False
) -> dict[int, float]:
    """``scaling[tp]`` that makes the profile hit ``p.targets`` at the calibration point."""
    n = p.calibration_tokens
    r1 = _roofline_tp1(model, gpu, p, n, StepKind.RECOMPUTE, block_causal)
    t1 = r1 + p.step_overhead_s
    scaling = {1: 1.0}
    for tp, target in sorted(p.targets.items()):
        rest = target * t1 - _allreduce(model, gpu, p, n, tp) - p.step_overhead_s
        if rest <= 0:
            raise ValueError(
                f"{model.name} on {gpu.name}: TP-{tp} cannot reach {target:.0%} of TP-1 latency, "
                "communication and overhead alone exceed it; lower allreduce_latency_s / step_overhead_s "
                "or raise calibration_tokens"
            )
        scaling[tp] = r1 / (tp * rest)
    known = sorted(scaling)
    if len(known) >= 3:
        a, b = known[-2], known[-1]
        # geometric continuation of the last doubling, e.g. scaling[8] = scaling[4]^2 / scaling[2]
        scaling[2 * b] = scaling[b] ** 2 / scaling[a]
    return scaling


def step_latency(
    model: ModelSpec,
    gpu: GPUSpec,
    tp: int,
    n: float,
    kind: StepKind,
    p: RooflineParams = ROOFLINE,
    scaling: Mapping[int, float] | None = None,
    block_causal: bool = False,
) -> float:
    """Seconds per step of a TP-``tp`` instance with ``n`` tokens in its batch (block mode:
    ``block_causal``)."""
    s = scaling or calibrate(model, gpu, p, block_causal)
    if tp not in s:
        raise ValueError(f"TP-{tp} is not calibrated (have {sorted(s)}): add a target for it in RooflineParams")
    roof = _roofline_tp1(model, gpu, p, n, kind, block_causal)
    return roof / (tp * s[tp]) + _allreduce(model, gpu, p, n, tp) + p.step_overhead_s


#: Suffix of a block-mode profile's name (``llada-8b-h100-block``).
BLOCK_SUFFIX = "-block"


def analytic_profile(
    model: str,
    gpu: str,
    tp_degrees: Sequence[int] = (1, 2, 4, 8),
    p: RooflineParams = ROOFLINE,
    block_causal: bool = False,
) -> LatencyProfile:
    """The calibrated roofline profile of ``model`` (key of :data:`MODELS`) on ``gpu`` (of
    :data:`GPUS`); ``block_causal``: the same model served as block diffusion (block mode)."""
    try:
        m, g = MODELS[model], GPUS[gpu]
    except KeyError:
        raise ValueError(
            f"unknown model {model!r} or GPU {gpu!r}: models {sorted(MODELS)}, GPUs {sorted(GPUS)}"
        ) from None
    scaling = calibrate(m, g, p, block_causal)
    curves = {
        kind: {
            tp: StepCurve.from_points((n, step_latency(m, g, tp, n, kind, p, scaling, block_causal)) for n in grid)
            for tp in tp_degrees
        }
        for kind, grid in ((StepKind.RECOMPUTE, RECOMPUTE_GRID), (StepKind.CACHE, CACHE_GRID))
    }
    meta = {
        "kind": "analytic",
        "model": asdict(m),
        "gpu": asdict(g),
        "roofline": {**asdict(replace(p, targets={})), "targets": {str(k): v for k, v in p.targets.items()}},
        "scaling": {str(k): v for k, v in scaling.items()},
        "block_causal": block_causal,
        "x_axis": {
            "recompute": "tokens in the batch (block mode: the prefills' prompts and finished blocks)"
            if block_causal
            else "tokens in the batch (requests x context)",
            "cache": "fed tokens (block mode: one block per request, two with an append)"
            if block_causal
            else "fed tokens (requests x block_length)",
        },
    }
    name = f"{model}-{gpu}{BLOCK_SUFFIX if block_causal else ''}"
    return LatencyProfile(name, curves[StepKind.RECOMPUTE], curves[StepKind.CACHE], meta)
