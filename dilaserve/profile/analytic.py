"""Analytic latency profiles for real checkpoints on real GPUs (a calibrated roofline).

For a TP-``tp`` instance and ``n`` tokens in the batch, one denoising step costs

    roofline = max(FLOPs / (peak * compute_eff), bytes / (hbm * memory_eff)) / (tp * scaling[tp])
    comm     = 2 * layers * (allreduce_latency + 2 (tp-1)/tp * n * hidden * act_bytes / (link * link_eff))
    host     = host_step + host_request * requests
    latency  = max(roofline + comm, host) + step_overhead

* FLOPs: 2 x parameters per token plus attention (4 x layers x hidden x n x context);
* bytes: the weights plus K/V traffic (a recompute step writes every token's K/V, a cache
  step reads each request's whole context);
* recompute steps hold ``n / context`` requests, cache steps feed ``n / block`` requests
  (one block each) that attend to ``context`` cached tokens;
* host: what the host spends issuing one step (kernel launches, per-request bookkeeping).
  The GPU runs while the host issues the next kernels, so a step costs the larger of the
  two: an eager engine is host-bound at small batch (a cache step of LLaDA-8B on an H200
  costs ~34 ms against a ~4 ms memory floor) and device-bound at large batch; a
  graph-captured engine has host terms near 0 and is the roofline. The host terms do not
  shrink with TP: every rank issues the same kernels. They are 0 in :data:`ROOFLINE` and
  fitted to this project's eager engine in :data:`EAGER_H200` (profiles
  ``<model>-h200-eager``).

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
        step_overhead_s: per-step host overhead (scheduling, sampling, launch) that does
            not overlap the GPU's work: added to every step.
        host_step_s / host_request_s: host time to issue one step, and per request in it,
            which overlaps the GPU's work: a step costs at least their sum (0: a
            graph-captured engine, whose steps are the roofline's).
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
    host_step_s: float = 0.0
    host_request_s: float = 0.0
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
    # SXM 141 GB: the H100's compute and NVLink, HBM3e at 4.8 TB/s.
    "h200": GPUSpec("h200", peak_flops=989e12, hbm_bytes_s=4.8e12, link_bytes_s=450e9),
}

ROOFLINE = RooflineParams()

#: This project's eager engine (``DenoisingEngine.step``, no CUDA graphs), measured on one
#: H200 at the published shapes (random bf16 weights, context 1276, block 32): the engine
#: rows of data/gpu/llada.jsonl and dream.jsonl (data/gpu/README.md). Fitted by
#: :func:`dilaserve.profile.host_fit.fit_host_terms`: ``compute_eff`` to the recompute steps
#: (batch 4-32; they are compute-bound), the host terms to the cache steps (batch 1-32;
#: host-bound but at 32), with no separate ``step_overhead_s`` (the engine's host work is
#: all in the host terms). The fit reproduces every measured step within 20%
#: (tests/profile/test_host_fit.py); host-bound steps vary with the host (a batch-1 cache
#: step took 21.6 ms on one machine, 35.5 ms on another), so these hold for that host.
EAGER_H200: dict[str, RooflineParams] = {
    "llada-8b": replace(ROOFLINE, compute_eff=0.496, step_overhead_s=0.0, host_step_s=30.5e-3, host_request_s=1.12e-3),
    "dream-7b": replace(ROOFLINE, compute_eff=0.579, step_overhead_s=0.0, host_step_s=22.9e-3, host_request_s=0.552e-3),
}
#: Suffix of a profile with the eager engine's host terms (``llada-8b-h200-eager``).
EAGER_SUFFIX = "-eager"

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


def step_work(
    model: ModelSpec, p: RooflineParams, n: float, kind: StepKind, block_causal: bool = False
) -> tuple[float, float]:
    """FLOPs and bytes of one TP-1 step with ``n`` tokens in its batch: the weights and the
    K/V the step writes (recompute) or reads (cache). The engine benchmark's floors use these."""
    ctx = attended_context(p, kind, block_causal)
    attn_flops = 4 * model.layers * model.hidden * n * ctx
    flops = 2 * model.params * n + attn_flops
    if kind is StepKind.RECOMPUTE:
        kv = n * model.kv_bytes_per_token  # every token's K/V written for the cache
    else:
        kv = (n / p.block_length) * ctx * model.kv_bytes_per_token  # each request reads its context
    return flops, model.weight_bytes + kv


def roofline_tp1(
    model: ModelSpec, gpu: GPUSpec, p: RooflineParams, n: float, kind: StepKind, block_causal: bool = False
) -> float:
    flops, nbytes = step_work(model, p, n, kind, block_causal)
    compute = flops / (gpu.peak_flops * p.compute_eff)
    memory = nbytes / (gpu.hbm_bytes_s * p.memory_eff)
    return max(compute, memory)


def host_seconds(p: RooflineParams, n: float, kind: StepKind) -> float:
    """The host's time to issue a step of ``n`` tokens: ``host_step_s`` plus ``host_request_s``
    per request (``n / context`` in a recompute step, ``n / block_length`` fed blocks in a
    cache step)."""
    if not (p.host_step_s or p.host_request_s):
        return 0.0
    requests = n / (p.context if kind is StepKind.RECOMPUTE else p.block_length)
    return p.host_step_s + p.host_request_s * requests


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
    r1 = roofline_tp1(model, gpu, p, n, StepKind.RECOMPUTE, block_causal)
    host = host_seconds(p, n, StepKind.RECOMPUTE)
    t1 = max(r1, host) + p.step_overhead_s
    scaling = {1: 1.0}
    for tp, target in sorted(p.targets.items()):
        device = target * t1 - p.step_overhead_s
        rest = device - _allreduce(model, gpu, p, n, tp)
        if rest <= 0 or device <= host:
            raise ValueError(
                f"{model.name} on {gpu.name}: TP-{tp} cannot reach {target:.0%} of TP-1 latency, "
                "communication, overhead and host time alone exceed it; lower allreduce_latency_s / "
                "step_overhead_s / host_step_s / host_request_s or raise calibration_tokens"
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
    roof = roofline_tp1(model, gpu, p, n, kind, block_causal)
    device = roof / (tp * s[tp]) + _allreduce(model, gpu, p, n, tp)
    return max(device, host_seconds(p, n, kind)) + p.step_overhead_s


#: Suffix of a block-mode profile's name (``llada-8b-h100-block``).
BLOCK_SUFFIX = "-block"


def analytic_profile(
    model: str,
    gpu: str,
    tp_degrees: Sequence[int] = (1, 2, 4, 8),
    p: RooflineParams = ROOFLINE,
    block_causal: bool = False,
    eager: bool = False,
) -> LatencyProfile:
    """The calibrated roofline profile of ``model`` (key of :data:`MODELS`) on ``gpu`` (of
    :data:`GPUS`); ``block_causal``: the same model served as block diffusion (block mode);
    ``eager``: with the host terms of this project's eager engine (:data:`EAGER_H200`, in
    place of ``p``; H200 only, the host they were measured with)."""
    try:
        m, g = MODELS[model], GPUS[gpu]
    except KeyError:
        raise ValueError(
            f"unknown model {model!r} or GPU {gpu!r}: models {sorted(MODELS)}, GPUs {sorted(GPUS)}"
        ) from None
    if eager:
        if gpu != "h200" or model not in EAGER_H200:
            raise ValueError(
                f"the eager engine's host terms were measured on an H200 for {sorted(EAGER_H200)}, "
                f"not {model!r} on {gpu!r}: use gpu 'h200' with one of those models, or eager=False"
            )
        p = EAGER_H200[model]
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
        # Which engine the host terms describe: a roofline (none), or analytic with host
        # terms fitted to the eager engine's measured steps (not a profile measured by
        # `python -m dilaserve.profile` on a GPU).
        "engine": "eager (analytic, host terms fitted to one H200, data/gpu/)" if eager else "none (roofline)",
        "x_axis": {
            "recompute": "tokens in the batch (block mode: the prefills' prompts and finished blocks)"
            if block_causal
            else "tokens in the batch (requests x context)",
            "cache": "fed tokens (block mode: one block per request, two with an append)"
            if block_causal
            else "fed tokens (requests x block_length)",
        },
    }
    name = f"{model}-{gpu}{BLOCK_SUFFIX if block_causal else ''}{EAGER_SUFFIX if eager else ''}"
    return LatencyProfile(name, curves[StepKind.RECOMPUTE], curves[StepKind.CACHE], meta)
