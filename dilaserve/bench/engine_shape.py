"""``python -m dilaserve.bench engine --shape llada-8b|dream-7b``: steps at a published shape.

Builds random weights at the published LLaDA-8B or Dream-7B shape straight on ``--device``
(no checkpoint is written or read; ``--layers N`` keeps the first N layers, for CPU runs and
tests) and times, at context ``--context`` (prompt + a canvas of ``--answer-tokens``) and
block 32:

* ``steps``: for cache steps at ``--cache-batches`` (1, 8, 32) and recompute-every-step steps at
  ``--recompute-batches`` (1, 4, 8), the median ms of one step ``raw`` (one
  ``DiffusionLM.block`` / ``DiffusionLM.full`` call on prepared inputs) and through the engine
  (``DenoisingEngine.step``, the engine's own bookkeeping and K/V handling included), each after
  a warm-up. ``floor_ms`` is the larger of the step's bytes (the weights and the K/V it reads or
  writes) over the measured copy rate and its FLOPs over the measured matmul rate, with the FLOP
  and byte counts of the analytic profile (``dilaserve.profile.analytic.step_work``).
  ``floor_ratio`` = ``engine_ms / floor_ms``; ``tflops`` and ``hbm_gbs`` are those counts over
  ``engine_ms``. The analytic counts charge every token all the weights, the embedding and
  the head included, where the model looks the embedding up and runs the head on one
  block's rows: at the published depth that overstates a recompute step's FLOPs by about a
  tenth, and with ``--layers 1`` or ``2`` (mostly embedding and head) several times, so a
  recompute step's ``floor_ratio`` there can fall below 1;
* ``copy_gbs``: a device-to-device copy of a large buffer, bytes read plus bytes written per
  second; ``matmul_tflops``: a large square matmul in the model's dtype;
* ``tokens_per_s_batch1``: a whole answer of ``--answer-tokens`` decoded alone, one token per
  step (random weights commit one anyway), with the dual cache and recomputing every step;
* ``gpu_mem_gb``: the peak memory torch allocated on the GPU (null on CPU). The engine's K/V
  pool takes most of what its memory budget leaves (``kv_pool_gb``; slots of exactly
  ``--context`` tokens, and room kept beside it for the recompute step of the largest cache
  batch), so the peak says more about that budget than about the steps. The raw steps all run
  before the engine is built, so their inputs never sit beside the pool.

On CUDA every timing brackets the call with CUDA events after a synchronisation and
synchronises after it, so a step's host work and its kernels both count. Weights are bfloat16
on every device: this CPU's bfloat16 matmuls (AVX-512 BF16) ran about twice as fast as
float32 ones, and the model is half the size. On CPU, use ``--layers 2`` and a short
``--context`` and ``--answer-tokens``: the published vocabulary's head alone is a
0.5-billion-weight matmul per logit row.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import torch

from dilaserve.engine import DenoisingEngine, StepKind
from dilaserve.engine.config import EngineConfig
from dilaserve.model import dream, llada
from dilaserve.model.adapters import DiffusionLM
from dilaserve.model.make_tiny import TinyShape, dream_config, llada_config
from dilaserve.model.native import NativeDiffusionLM, NativeSpec
from dilaserve.profile.analytic import ModelSpec, RooflineParams, step_work

from .common import machine_info

#: The published shapes: family and sizes (the vocabulary is the family's).
SHAPES: dict[str, tuple[str, TinyShape]] = {
    "llada-8b": ("llada", TinyShape(layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=12288)),
    "dream-7b": ("dream", TinyShape(layers=28, hidden=3584, heads=28, kv_heads=4, intermediate=18944)),
}
BLOCK = 32


@dataclass(frozen=True)
class ShapeRun:
    """What one shape benchmark measures."""

    #: a key of :data:`SHAPES`
    shape: str
    #: torch device, e.g. ``cuda`` or ``cpu``
    device: str = "cpu"
    #: layers kept (None: the published count)
    layers: int | None = None
    #: tokens per request: prompt + canvas (the analytic profile's default 1020 + 256)
    context: int = 1276
    #: the canvas, and the answer decoded for ``tokens_per_s_batch1``
    answer_tokens: int = 256
    cache_batches: tuple[int, ...] = (1, 8, 32)
    recompute_batches: tuple[int, ...] = (1, 4, 8)
    #: timed steps per measurement (the median is reported), after one warm-up
    repeats: int = 5

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"--shape {self.shape}: choose one of {', '.join(SHAPES)}")
        if self.layers is not None and not 1 <= self.layers <= SHAPES[self.shape][1].layers:
            raise ValueError(f"--layers {self.layers}: choose 1..{SHAPES[self.shape][1].layers} for {self.shape}")
        if self.answer_tokens < BLOCK or self.answer_tokens % BLOCK:
            raise ValueError(f"--answer-tokens {self.answer_tokens}: use a positive multiple of the block ({BLOCK})")
        if self.context <= self.answer_tokens:
            raise ValueError(
                f"--context {self.context} leaves no prompt before a {self.answer_tokens}-token canvas: "
                "make it larger than --answer-tokens"
            )
        if not 1 <= self.repeats < BLOCK - 1:
            raise ValueError(f"--repeats {self.repeats}: use 1..{BLOCK - 2} (the cache steps of one block)")
        if min(self.cache_batches + self.recompute_batches, default=1) < 1:
            raise ValueError("batch sizes must be positive, e.g. --cache-batches 1,8,32")

    @property
    def prompt_len(self) -> int:
        return self.context - self.answer_tokens


# ------------------------------------------------------------------ model
def native_spec(shape: str, layers: int | None) -> tuple[str, NativeSpec]:
    """The family and spec of ``shape`` with its first ``layers`` layers (None: all), read
    from the published config.json keys as a downloaded folder's would be."""
    family, sizes = SHAPES[shape]
    sizes = replace(sizes, layers=layers or sizes.layers)
    if family == "llada":
        return family, llada.spec_from_config(llada_config(sizes))
    return family, dream.spec_from_config(dream_config(sizes))


def build_random_lm(shape: str, layers: int | None, device: str, dtype: torch.dtype = torch.bfloat16) -> DiffusionLM:
    """A native model at ``shape`` with random weights, allocated on ``device`` directly."""
    family, spec = native_spec(shape, layers)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = NativeDiffusionLM(spec)
    finally:
        torch.set_default_dtype(default)
    model = model.to_empty(device=device).eval()
    gen = torch.Generator(device=device).manual_seed(0)
    bound = 0.02 * math.sqrt(3.0)  # uniform with the std of the usual N(0, 0.02) init
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("ln" in name or "norm" in name):
                p.fill_(1.0)
            else:
                p.uniform_(-bound, bound, generator=gen)
    return DiffusionLM(
        model=model,
        tokenizer=None,
        mask_id=spec.mask_token_id,
        eos_id=spec.eos_token_id,
        pad_id=spec.pad_token_id,
        max_context=spec.max_position_embeddings,
        supports_cache=True,
        logit_shift=spec.logit_shift,
        name=f"{shape} (random weights)",
        family=family,
    )


def model_spec(lm: DiffusionLM, shape: str) -> ModelSpec:
    """The analytic profile's view of the model as built (its layers, its parameter count)."""
    spec = lm.model.spec
    params = sum(p.numel() for p in lm.model.parameters())
    width = next(lm.model.parameters()).element_size()
    return ModelSpec(shape, float(params), spec.num_layers, spec.hidden_size, spec.num_kv_heads, spec.head_dim, width)


# ------------------------------------------------------------------ timing
def sig(x: float, digits: int = 4) -> float:
    """``x`` to ``digits`` significant digits (rates span 0.01 on a CPU to thousands on a GPU)."""
    return float(f"{x:.{digits}g}")


def timer(device: str) -> Callable[[Callable[[], object]], float]:
    """Milliseconds of one call: CUDA events around it on a GPU (synchronised before and
    after, so host work and kernels both count), the wall clock on CPU."""
    if not device.startswith("cuda"):

        def wall(fn: Callable[[], object]) -> float:
            t0 = time.perf_counter()
            fn()
            return 1000 * (time.perf_counter() - t0)

        return wall

    def events(fn: Callable[[], object]) -> float:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        return float(start.elapsed_time(end))

    return events


def median_ms(time_one: Callable, fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: first-call costs (allocator, kernels, rotary tables) stay out
    return statistics.median(time_one(fn) for _ in range(repeats))


def copy_gbs(device: str, time_one: Callable, nbytes: int) -> float:
    """Bytes read plus bytes written per second by ``dst.copy_(src)`` of ``nbytes``, in GB/s."""
    src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    ms = median_ms(time_one, lambda: dst.copy_(src), 5)
    return 2 * nbytes / (ms / 1000) / 1e9


def matmul_tflops(device: str, time_one: Callable, n: int, dtype: torch.dtype) -> float:
    """FLOP/s of an ``n`` x ``n`` by ``n`` x ``n`` matmul, in TFLOP/s."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    ms = median_ms(time_one, lambda: a @ b, 5)
    return 2 * n**3 / (ms / 1000) / 1e12


# ------------------------------------------------------------------ steps
def prompt_ids(n: int, seed: int) -> list[int]:
    """``n`` random token ids below every family's special ids."""
    return np.random.default_rng(seed).integers(0, 100_000, n).tolist()


def raw_step(lm: DiffusionLM, run: ShapeRun, kind: StepKind, batch: int) -> Callable[[], object]:
    """One model call as the engine makes it, on inputs prepared once: a recompute pass over
    whole canvases (logits at the first block's rows), or a cache step feeding that block
    against a full cache of random K/V."""
    dev, lead = lm.device, lm.lead
    start = run.prompt_len  # the canvas's first block
    rows = torch.arange(BLOCK, device=dev).expand(batch, BLOCK)
    gen = torch.Generator(device=dev).manual_seed(batch)
    if kind is StepKind.RECOMPUTE:
        ids = torch.randint(0, 100_000, (batch, run.context), device=dev, generator=gen)
        ids[:, start:] = lm.mask_id
        attn = torch.ones(batch, run.context, dtype=torch.bool, device=dev)
        return lambda: lm.full(ids, attn, return_kv=False, logit_positions=start + rows)
    spec, dtype = lm.model.spec, next(lm.model.parameters()).dtype
    shape = (batch, spec.num_kv_heads, run.context, spec.head_dim)
    past = [
        tuple(torch.empty(shape, dtype=dtype, device=dev).uniform_(-1, 1, generator=gen) for _ in range(2))
        for _ in range(spec.num_layers)
    ]
    past_mask = torch.ones(batch, run.context, dtype=torch.bool, device=dev)
    ids = torch.randint(0, 100_000, (batch, lead + BLOCK), device=dev, generator=gen)
    ids[:, lead:] = lm.mask_id
    pos = torch.arange(start - lead, start + BLOCK, device=dev).expand(batch, -1)
    return lambda: lm.block(ids, pos, past, past_mask, logit_positions=rows)


def engine_step_ms(engine: DenoisingEngine, run: ShapeRun, kind: StepKind, batch: int, time_one: Callable) -> float:
    """Median ms of ``DenoisingEngine.step`` over ``batch`` fresh requests, every step of
    ``kind`` (one token per step, so a cache step stays in the block its recompute step cached)."""
    states = [
        engine.new_request(prompt_ids(run.prompt_len, b), run.answer_tokens, use_cache=kind is StepKind.CACHE)
        for b in range(batch)
    ]
    kinds: set = set()

    def step() -> None:
        kinds.update(r.kind for r in engine.step(states, [math.inf] * batch))

    if kind is StepKind.CACHE:
        step()  # the block's recompute step, which caches its K/V
        kinds.clear()
    try:
        ms = median_ms(time_one, step, run.repeats)
    finally:
        for st in states:
            engine.release(st.request_id)
    if kinds != {kind}:
        raise RuntimeError(f"the engine ran {sorted(k.value for k in kinds)} steps where {kind.value} was measured")
    return ms


def decode_tokens_per_s(engine: DenoisingEngine, run: ShapeRun, use_cache: bool, time_one: Callable) -> float:
    """Answer tokens per second of one request decoded alone, one token per step."""
    st = engine.new_request(prompt_ids(run.prompt_len, 99), run.answer_tokens, use_cache=use_cache)

    def decode() -> None:
        while not st.finished:
            engine.step([st], [math.inf])

    ms = time_one(decode)
    engine.release(st.request_id)
    return sum(st.tokens_per_step) / (ms / 1000)


def engine_config(run: ShapeRun, mspec: ModelSpec) -> EngineConfig:
    """The engine's K/V pool for this run: slots of exactly the run's context, and on a GPU
    room beside the pool for the recompute step of the largest cache batch, which holds every
    layer's K/V of its whole canvases at once before they go to the pool."""
    transient = max(run.cache_batches) * run.context * mspec.kv_bytes_per_token
    return EngineConfig(slot_tokens=run.context, activation_reserve_bytes=int(transient) + (8 << 30))


def run_shape(run: ShapeRun) -> dict:
    """Every measurement of the module docstring, as its JSON object. The raw steps all run
    before the engine exists: on a GPU its K/V pool takes most of the memory left."""
    started = time.perf_counter()
    cuda = run.device.startswith("cuda")
    time_one = timer(run.device)
    lm = build_random_lm(run.shape, run.layers, run.device)
    mspec = model_spec(lm, run.shape)
    copy = copy_gbs(run.device, time_one, (2 << 30) if cuda else (256 << 20))
    mm = matmul_tflops(run.device, time_one, 8192 if cuda else 1024, torch.bfloat16)
    params = RooflineParams(context=run.context, answer_tokens=run.answer_tokens, block_length=BLOCK)
    plan = [(StepKind.CACHE, b) for b in run.cache_batches] + [(StepKind.RECOMPUTE, b) for b in run.recompute_batches]
    raw_ms = {}
    for kind, batch in plan:
        raw = raw_step(lm, run, kind, batch)
        raw_ms[kind, batch] = median_ms(time_one, raw, run.repeats)
        del raw  # its inputs (a cache step's whole K/V) are freed before the next
    engine = DenoisingEngine(lm, engine_config(run, mspec))
    steps = []
    for kind, batch in plan:
        eng_ms = engine_step_ms(engine, run, kind, batch, time_one)
        tokens = batch * (BLOCK if kind is StepKind.CACHE else run.context)
        flops, nbytes = step_work(mspec, params, tokens, kind)
        floor_ms = 1000 * max(nbytes / (copy * 1e9), flops / (mm * 1e12))
        steps.append(
            {
                "kind": kind.value,
                "batch": batch,
                "raw_ms": round(raw_ms[kind, batch], 3),
                "engine_ms": round(eng_ms, 3),
                "floor_ms": round(floor_ms, 3),
                "floor_ratio": round(eng_ms / floor_ms, 2),
                "tflops": sig(flops / (eng_ms / 1000) / 1e12),
                "hbm_gbs": sig(nbytes / (eng_ms / 1000) / 1e9),
            }
        )
    tps = {
        "dual_cache": sig(decode_tokens_per_s(engine, run, True, time_one)),
        "recompute_every_step": sig(decode_tokens_per_s(engine, run, False, time_one)),
    }
    return {
        "shape": run.shape,
        "device": torch.cuda.get_device_name(torch.device(run.device)) if cuda else run.device,
        "steps": steps,
        "tokens_per_s_batch1": tps,
        "gpu_mem_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if cuda else None,
        "copy_gbs": sig(copy),
        "kv_pool_gb": round(engine.pool.kv.nbytes / 1e9, 3) if engine.pool is not None else None,
        "matmul_tflops": sig(mm),
        "dtype": "bfloat16",
        "layers": mspec.layers,
        "params": int(mspec.params),
        "weight_gb": round(mspec.weight_bytes / 1e9, 3),
        "context": run.context,
        "block": BLOCK,
        "answer_tokens": run.answer_tokens,
        "repeats": run.repeats,
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": machine_info(),
    }


def batches(text: str) -> tuple[int, ...]:
    """``1,8,32`` -> (1, 8, 32) (argparse type)."""
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive batch sizes separated by commas, e.g. 1,8,32")
    return out


#: Defaults off a GPU: one published layer already costs seconds per step on a CPU, and the
#: head over the published vocabulary as much again, so a CPU run (a test, a smoke run) takes
#: a short context, one-block answers and small batches. Flags override each.
CPU_DEFAULTS = {"context": 96, "answer_tokens": 32, "cache_batches": (1, 2), "recompute_batches": (1,), "repeats": 2}


def add_arguments(p) -> None:
    """The shape benchmark's flags on the engine benchmark's parser."""
    g = p.add_argument_group(
        "published shapes (--shape; the description above is the other benchmark's). "
        f"Defaults are a GPU's; on CPU {CPU_DEFAULTS}"
    )
    g.add_argument("--shape", choices=sorted(SHAPES), help="random bf16 weights at this published shape")
    g.add_argument("--layers", type=int, default=None, help="keep the first N layers (default: all)")
    g.add_argument("--context", type=int, default=None, help="prompt + canvas tokens per request (GPU default 1276)")
    g.add_argument("--answer-tokens", type=int, default=None, help="canvas, and the decoded answer (GPU default 256)")
    g.add_argument("--cache-batches", type=batches, default=None, help="GPU default 1,8,32")
    g.add_argument("--recompute-batches", type=batches, default=None, help="GPU default 1,4,8")
    g.add_argument("--repeats", type=int, default=None, help="timed steps per measurement (GPU default 5)")


#: flags of this benchmark alone (argparse dest names)
SHAPE_FLAGS = ("layers", "context", "answer_tokens", "cache_batches", "recompute_batches", "repeats")


def stray_flags(args) -> list[str]:
    """The shape-only flags given without ``--shape`` (as typed, e.g. ``--layers``)."""
    if args.shape:
        return []
    return ["--" + k.replace("_", "-") for k in SHAPE_FLAGS if getattr(args, k) is not None]


def shape_run(args) -> ShapeRun:
    """The :class:`ShapeRun` of parsed flags, unset ones at the device's defaults (raises
    ``ValueError`` with the fix)."""
    given = {k: getattr(args, k) for k in SHAPE_FLAGS[1:] if getattr(args, k) is not None}
    defaults = {} if args.device.startswith("cuda") else CPU_DEFAULTS
    return ShapeRun(args.shape, args.device, args.layers, **{**defaults, **given})
