"""``python -m dilaserve.bench engine [--quick] [--json]``: denoising engine throughput and quality.

Reports, on the embedded default model:

* ``tokens_per_s``: answer tokens per wall second at batch 1, 8 and 32
  (threshold 0.9, dual cache on), each decoding the same 32 mixed-task requests
  in batches of that size, so every batch size does the same work;
* ``cache_speedup``: tokens/s with the dual cache over recompute-every-step,
  at the longest task length (4 blocks), batch 32; for a LLaDA or Dream folder at
  ``--gen-length`` (256 by default) on the same prompts;
* ``batch_speedup``: tokens/s at batch 32 over batch 1;
* ``continuous``: the same two numbers with continuous batching, as a server
  runs: up to 32 requests in flight, a finished request's slot refilled from
  the queue at once, over a pool of 128 mixed requests. The static batches of
  ``tokens_per_s`` spend their last steps nearly empty, once the short answers
  are done; here the batch stays full until the queue runs dry;
* ``*_spread``: each ratio is the median over repetitions measured in turn
  (A, B, A, B, ...), so another process slowing the machine for a while slows
  both sides; its spread is the max - min of the per-repetition ratios;
* ``step_ms_per_request``: wall ms of one recompute step and of one cache step,
  divided by the batch size, at batch 1 and 32 (the longest task length): how
  much of a step batching can share. Where the batch-32 figure is close to the
  batch-1 one the engine is compute-bound and batching cannot help much;
* ``accuracy`` / ``mean_steps``: per threshold on the task suite, plus the
  one-token-per-step reference under ``"sequential"``; ``accuracy_by_task``
  splits the accuracy by task; ``tokens_per_step``: canvas positions committed
  per step (LLaDA on GSM8K commits 3.25 at 0.9);
* ``accuracy_by_canvas``: accuracy at threshold 0.9 on the same suite with the
  canvas at 1x, 2x and 3x each task's generation length (capped at the
  context), the rest of the canvas left to EOS as a generous ``max_tokens``
  leaves it; ``accuracy_by_canvas_by_task`` splits it by task;
  For a block-causal model it is null: a block never sees later blocks, so a larger
  canvas only lets an answer that has not ended run on, and the 1x decode is the
  first blocks of the 2x one;
* ``step_ms_by_answer_blocks``: mean wall ms per step over a whole decode at batch 1
  (threshold 0.9, cache on, one torch thread) of arith requests whose canvas is 1 and 4
  blocks, the median over requests and repetitions, ``{"1": ms, "4": ms}``; ``answer_blocks_decoded`` says how many blocks they
  decoded on average. A block-causal step costs about one block whatever the
  answer's length; the dual cache's recompute steps grow with the canvas;
* ``block_causal``: whether the checkpoint is a block-diffusion model;
* ``family``: ``dila`` (the embedded model), ``llada`` or ``dream``, else the
  checkpoint's model_type;
* ``machine``.
All ratios come from one run on one machine.

* ``wall_s``: seconds the whole benchmark took, model load included;
* ``ray_step_overhead_ms``, ``ray_transport_ms``, ``ray_first_step_overhead_ms``: with
  ``--ray``, what driving a step through a Ray instance adds to it at batch 1 and 32
  (:mod:`dilaserve.bench.engine_ray`); null without it, which keeps the default run free of Ray.

``--shape llada-8b|dream-7b`` runs another benchmark instead: steps at a published shape on
random weights, against their floors (:mod:`dilaserve.bench.engine_shape`).

``--checkpoint`` takes any servable folder, e.g. one from ``python -m
dilaserve.model.make_tiny``. LLaDA and Dream do not speak the synthetic task language,
so for them the accuracy fields are null.

``--quick`` shortens every workload (``sizes`` in the JSON lists what ran) and, on CPU,
decodes on one torch thread (``machine.torch_threads`` says so): a quick run is a smoke run,
often on a shared host, where two torch threads fight other work for the cores. Its
workloads: 2 repetitions instead of 3, a smaller task suite, 12 continuous requests instead
of 128, 8 requests for ``cache_speedup`` instead of 32, 4 answers per length for
``step_ms_by_answer_blocks`` instead of 16. On a LLaDA or Dream folder on CPU it shortens
further, since a random tiny checkpoint commits one token per step and every step runs
its head over a 126k-152k vocabulary: batches up to 4 (``batch_speedup`` is batch 4 over
batch 1), canvases of one block (32 tokens) for ``tokens_per_s``, of at most two for
``continuous`` (8 requests), 2 requests at 64 tokens for ``cache_speedup`` (the full run:
256; ``--gen-length`` sets it; the dual cache saves more on longer canvases, so the quick
ratio is the lower one) and 1 answer per length. Warm-ups decode one block whatever the
run. A default ``make_tiny`` folder then takes under two minutes on two cores beside other
work (``wall_s`` says how long a run took): LLaDA 83 s, Dream 98 s at load averages 3-5,
where LLaDA on two threads took 191 s at load 1-4 and 464 s at load 3-5.5.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from dataclasses import asdict, dataclass

import torch

from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS
from dilaserve.engine import DEFAULT_CHECKPOINT, DenoisingEngine
from dilaserve.model.checkpoint import families
from dilaserve.suite_decoding import accuracy_by_canvas, quality_table
from dilaserve.tasks import BLOCK_LENGTH, TASKS, task_suite

from . import engine_shape
from .common import emit, interleaved, machine_info, median_ratio

THRESHOLDS = CANDIDATE_THRESHOLDS


def warm_up(engine: DenoisingEngine, prompts, gen_lengths, use_cache: bool = True) -> None:
    """Decode one block of the first prompt, so first-call costs stay out of the timings (a
    whole answer would cost a random tiny LLaDA / Dream one step per token)."""
    engine.generate(prompts[:1], gen_length=[min(gen_lengths[0], BLOCK_LENGTH)], use_cache=use_cache)


def throughput(
    engine: DenoisingEngine, prompts, gen_lengths, use_cache: bool, repeats: int, batch_size: int | None = None
) -> float:
    """Answer tokens per second decoding ``prompts`` at threshold 0.9, ``batch_size`` at a time (all at once by default)."""
    warm_up(engine, prompts, gen_lengths, use_cache)
    bs = batch_size or len(prompts)
    tokens, elapsed = 0, 0.0
    for _ in range(repeats):
        for lo in range(0, len(prompts), bs):
            t0 = time.perf_counter()
            gens = engine.generate(
                prompts[lo : lo + bs], threshold=0.9, gen_length=gen_lengths[lo : lo + bs], use_cache=use_cache
            )
            elapsed += time.perf_counter() - t0
            tokens += sum(len(g.token_ids) for g in gens)
    return tokens / elapsed if elapsed else 0.0


def decode_continuously(engine: DenoisingEngine, prompts, gen_lengths, in_flight: int, threshold: float = 0.9) -> list:
    """Decode every prompt with up to ``in_flight`` requests stepping together, each slot
    refilled from the queue as soon as it frees; the finished states, in prompt order."""
    states = [engine.new_request(p, g) for p, g in zip(prompts, gen_lengths)]
    queue, active = states[::-1], []
    while queue or active:
        while queue and len(active) < in_flight:
            active.append(queue.pop())
        engine.step(active, [threshold] * len(active))
        active = [s for s in active if not s.finished]
    return states


def continuous_throughput(engine: DenoisingEngine, prompts, gen_lengths, in_flight: int) -> float:
    """Answer tokens per second of :func:`decode_continuously` at threshold 0.9."""
    warm_up(engine, prompts, gen_lengths)
    t0 = time.perf_counter()
    states = decode_continuously(engine, prompts, gen_lengths, in_flight)
    return sum(len(s.answer_ids()) for s in states) / (time.perf_counter() - t0)


def step_costs(engine: DenoisingEngine, prompts, gen_lengths, batch_sizes=(1, 32), cache_steps: int = 4) -> dict:
    """Wall ms per request of one recompute step and of one cache step, per batch size."""
    out: dict = {"recompute": {}, "cache": {}}
    warm_up(engine, prompts, gen_lengths)
    for bs in batch_sizes:
        states = [engine.new_request(p, g) for p, g in zip(prompts[:bs], gen_lengths[:bs])]
        t0 = time.perf_counter()
        engine.step(states, [0.9] * bs)
        out["recompute"][str(bs)] = round(1000 * (time.perf_counter() - t0) / bs, 3)
        # threshold 1.0 commits one token per step, so every request stays in its block
        t0 = time.perf_counter()
        for _ in range(cache_steps):
            engine.step(states, [1.0] * bs)
        out["cache"][str(bs)] = round(1000 * (time.perf_counter() - t0) / (cache_steps * bs), 3)
        for st in states:
            engine.release(st.request_id)
    return out


def arith_of_blocks(blocks: int, n: int, seed: int = 0) -> list:
    """``n`` arith instances whose canvas is ``blocks`` blocks long."""
    task = TASKS["arith"]
    sizes = [s for s in task.sizes if task.sample(random.Random(0), s).gen_length == blocks * BLOCK_LENGTH]
    rng = random.Random(seed)
    return [task.sample(rng, rng.choice(sizes)) for _ in range(n)]


def decode_alone_ms_per_step(engine: DenoisingEngine, instances, threshold: float = 0.9) -> tuple[float, float]:
    """Wall ms per step of a whole decode of each instance alone (batch 1, cache on), the
    median over the instances (a machine shared with other work slows some decodes a lot),
    and the mean number of blocks each decoded."""
    per_request, blocks = [], 0
    for x in instances:
        st = engine.new_request(x.prompt, x.gen_length)
        t0 = time.perf_counter()
        while not st.finished:
            engine.step([st], [threshold])
        per_request.append(1000 * (time.perf_counter() - t0) / st.steps_done)
        blocks += st.block_index + 1  # a request ends in the block of its first EOS
    return statistics.median(per_request), blocks / max(1, len(instances))


def step_ms_by_answer_blocks(engine: DenoisingEngine, n: int, repeats: int) -> tuple[dict, dict]:
    """Per-request step cost at batch 1 over whole decodes of 1- and 4-block answers (medians
    over repetitions taken in turn), and the blocks those answers decoded."""
    sets = {str(b): arith_of_blocks(b, n, seed=b) for b in (1, 4)}
    decode_alone_ms_per_step(engine, sets["1"][:1])  # warm-up
    blocks: dict = {}

    def measure(key: str) -> float:
        ms, blocks[key] = decode_alone_ms_per_step(engine, sets[key])
        return ms

    # one torch thread: a batch-1 step of a small model gains nothing from more, and on a
    # machine shared with other work a second thread's stalls swamp what is measured
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = interleaved({k: (lambda k=k: measure(k)) for k in sets}, repeats)
    finally:
        torch.set_num_threads(threads)
    return {k: round(statistics.median(v), 3) for k, v in runs.items()}, {k: round(v, 2) for k, v in blocks.items()}


def longest_instances(n: int, seed: int = 0):
    task = TASKS["arith"]
    rng = random.Random(seed)
    return [task.sample(rng, max(task.sizes)) for _ in range(n)]


@dataclass(frozen=True)
class Sizes:
    """How much each part of the benchmark decodes (``--quick`` shrinks these)."""

    #: repetitions of every ratio, measured in turn
    repeats: int = 3
    #: requests of ``tokens_per_s``, and its largest batch
    batch: int = 32
    #: longest canvas of ``tokens_per_s`` and ``continuous`` (None: the tasks' own)
    canvas_cap: int | None = None
    #: task-suite size per task the continuous pool is drawn from, and the pool's size
    pool_per_task: int = 43
    pool: int = 128
    #: requests of ``cache_speedup`` (at the longest task length, or ``cache_gen_length``)
    cache_requests: int = 32
    cache_gen_length: int | None = None
    #: task-suite size per task of the accuracy tables
    suite_per_task: int = 50
    #: answers per length of ``step_ms_by_answer_blocks``
    answers_per_length: int = 16


FULL = Sizes()
QUICK = Sizes(repeats=2, pool_per_task=4, pool=12, cache_requests=8, suite_per_task=10, answers_per_length=4)
#: A random tiny LLaDA / Dream on CPU commits one token per step, each step's head spans the
#: family's whole vocabulary: short canvases and small batches keep a quick run to minutes.
QUICK_NATIVE_CPU = Sizes(
    repeats=2,
    batch=4,
    canvas_cap=32,
    pool_per_task=4,
    pool=8,
    cache_requests=2,
    cache_gen_length=64,
    suite_per_task=0,
    answers_per_length=1,
)


def sizes_for(quick: bool, native: bool, device: str) -> Sizes:
    if not quick:
        return Sizes(cache_gen_length=256) if native else FULL
    return QUICK_NATIVE_CPU if native and device == "cpu" else QUICK


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.bench engine",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--device", default="cpu", help="torch device the engine runs on, e.g. cuda")
    p.add_argument(
        "--quick",
        action="store_true",
        help="shorter workloads and 2 repetitions, on CPU on one torch thread; on a LLaDA / Dream folder on CPU "
        "also one-block canvases, batches up to 4 and 2 requests at 64 tokens for cache_speedup (the description "
        "lists every cut)",
    )
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument(
        "--ray",
        action="store_true",
        help="also measure ray_step_overhead_ms at batch 1 and 32 (starts a local Ray cluster; "
        "dilaserve/bench/engine_ray.py says how)",
    )
    p.add_argument(
        "--gen-length",
        type=int,
        default=None,
        help="canvas of the cache_speedup comparison (default: the longest task's; for LLaDA / Dream 256, "
        "64 with --quick on CPU)",
    )
    engine_shape.add_arguments(p)
    args = p.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        p.error(f"--device {args.device}: this torch build sees no CUDA GPU; run on a GPU host or use --device cpu")
    if engine_shape.stray_flags(args):
        p.error(f"{', '.join(engine_shape.stray_flags(args))} apply only with --shape, e.g. --shape llada-8b")
    if args.shape:
        try:
            run = engine_shape.shape_run(args)
        except ValueError as e:
            p.error(str(e))
        emit(engine_shape.run_shape(run), args.json)
        return 0
    if args.gen_length is not None and (args.gen_length < 32 or args.gen_length % 32):
        p.error(f"--gen-length {args.gen_length}: use a positive multiple of the block length 32, e.g. 256")
    if args.quick and args.device == "cpu":
        torch.set_num_threads(1)  # the module docstring says why
    started = time.perf_counter()
    engine = DenoisingEngine.from_pretrained(args.checkpoint, device=args.device)
    family = engine.lm.family
    native = family in families()
    size = sizes_for(args.quick, native, args.device)
    # Ratios are medians over repetitions taken in turn (see the module docstring).
    repeats = size.repeats
    top = size.batch

    def capped(gen_lengths: list[int]) -> list[int]:
        return [min(g, size.canvas_cap) for g in gen_lengths] if size.canvas_cap else gen_lengths

    mixed = task_suite(12, seed=1)
    random.Random(0).shuffle(mixed)
    workload = mixed[:top]
    work_prompts, work_lengths = [x.prompt for x in workload], capped([x.gen_length for x in workload])
    tps_runs = interleaved(
        {
            str(bs): (lambda bs=bs: throughput(engine, work_prompts, work_lengths, True, 1, bs))
            for bs in sorted({1, 8, top})
            if bs <= top
        },
        repeats,
    )
    tps = {k: statistics.median(v) for k, v in tps_runs.items()}

    pool = task_suite(size.pool_per_task, seed=5)[: size.pool]
    random.Random(0).shuffle(pool)
    # continuous canvases keep two lengths where a cap applies, so slots free at different times
    pool_prompts = [x.prompt for x in pool]
    pool_lengths = (
        [min(x.gen_length, 2 * size.canvas_cap) for x in pool]
        if size.canvas_cap
        else capped([x.gen_length for x in pool])
    )
    flow_runs = interleaved(
        {
            str(n): (lambda n=n: continuous_throughput(engine, pool_prompts, pool_lengths, n))
            for n in (1, min(top, len(pool)))
        },
        repeats,
    )
    flowing = {k: statistics.median(v) for k, v in flow_runs.items()}

    longest = longest_instances(size.cache_requests)
    gen_length = args.gen_length or size.cache_gen_length
    prompts = [x.prompt for x in longest]
    lengths = [gen_length or x.gen_length for x in longest]
    cache_runs = interleaved(
        {
            "cached": lambda: throughput(engine, prompts, lengths, True, 1),
            "recompute": lambda: throughput(engine, prompts, lengths, False, 1),
        },
        repeats,
    )
    cached, recompute = statistics.median(cache_runs["cached"]), statistics.median(cache_runs["recompute"])
    cache_speedup, cache_spread = median_ratio(cache_runs["cached"], cache_runs["recompute"])
    batch_speedup, batch_spread = median_ratio(tps_runs[str(top)], tps_runs["1"])
    flow_speedup, flow_spread = median_ratio(flow_runs[str(min(top, len(pool)))], flow_runs["1"])
    costs = step_costs(engine, prompts, lengths, (1, len(longest)))

    # LLaDA and Dream do not speak the synthetic task language: no accuracy for them
    suite = [] if native or not size.suite_per_task else task_suite(size.suite_per_task, seed=2024)
    rows = quality_table(engine, suite, list(THRESHOLDS) + [math.inf]) if suite else None
    # meaningless for block diffusion (the module docstring says why)
    canvas = accuracy_by_canvas(engine, suite) if suite and not engine.lm.block_causal else None
    by_blocks, blocks_decoded = step_ms_by_answer_blocks(engine, size.answers_per_length, repeats)
    ray = {"ray_step_overhead_ms": None, "ray_transport_ms": None, "ray_first_step_overhead_ms": None}
    if args.ray:
        from .engine_ray import ray_step_overhead

        ray_work = {str(n): ([x.prompt for x in longest_instances(n)], [BLOCK_LENGTH * 4] * n) for n in (1, 32)}
        ray = ray_step_overhead(engine, args.checkpoint, ray_work)
    result = {
        "family": family,
        "tokens_per_s": {k: round(v, 1) for k, v in tps.items()},
        # null when the model wrote no answer tokens at all (an untrained checkpoint)
        "cache_speedup": cache_speedup,
        "cache_speedup_spread": cache_spread,
        "cache_tokens_per_s": {
            "dual_cache": round(cached, 1),
            "recompute_every_step": round(recompute, 1),
            "batch": len(longest),
            "gen_length": max(lengths),
        },
        "batch_speedup": batch_speedup,
        "batch_speedup_spread": batch_spread,
        "batch_speedup_batch": top,
        "continuous": {
            "tokens_per_s": {k: round(v, 1) for k, v in flowing.items()},
            "batch_speedup": flow_speedup,
            "batch_speedup_spread": flow_spread,
            "requests": len(pool),
        },
        "repetitions": repeats,
        "step_ms_per_request": costs,
        "accuracy": {r.label: round(r.accuracy, 4) for r in rows} if rows else None,
        "mean_steps": {r.label: round(r.mean_steps, 2) for r in rows} if rows else None,
        "accuracy_by_task": {r.label: {t: round(a, 4) for t, a in r.by_task.items()} for r in rows} if rows else None,
        "tokens_per_step": {r.label: round(r.tokens_per_step, 2) for r in rows} if rows else None,
        "accuracy_by_canvas": {k: round(v["accuracy"], 4) for k, v in canvas.items()} if canvas else None,
        "accuracy_by_canvas_by_task": (
            {k: {t: round(a, 4) for t, a in v["by_task"].items()} for k, v in canvas.items()} if canvas else None
        ),
        "step_ms_by_answer_blocks": by_blocks,
        # null without --ray
        **ray,
        "answer_blocks_decoded": blocks_decoded,
        "block_causal": engine.lm.block_causal,
        "suite_size": len(suite),
        "checkpoint": engine.lm.name,
        "device": args.device,
        "quick": args.quick,
        "sizes": asdict(size),
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": machine_info(),
    }
    emit(result, args.json)
    return 0
