"""``python -m dilaserve.bench engine [--quick] [--json]``: denoising engine throughput and quality.

Reports, on the embedded default model:

* ``tokens_per_s``: answer tokens per wall second at batch 1, 8 and 32
  (threshold 0.9, dual cache on);
* ``cache_speedup``: tokens/s with the dual cache over recompute-every-step,
  at the longest task length (4 blocks), batch 32;
* ``batch_speedup``: tokens/s at batch 32 over batch 1;
* ``accuracy`` / ``mean_steps``: per threshold on the task suite, plus the
  one-token-per-step reference under ``"sequential"``;
* ``machine``.
All ratios come from one run on one machine.
"""
from __future__ import annotations

import argparse
import math
import random
import time

from dilaserve.engine import DEFAULT_CHECKPOINT, DenoisingEngine
from dilaserve.eval_quality import quality_table
from dilaserve.tasks import TASKS, task_suite

from .common import emit, machine_info

THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)


def throughput(engine: DenoisingEngine, prompts, gen_lengths, use_cache: bool, repeats: int) -> float:
    """Answer tokens per second decoding ``prompts`` as one batch at threshold 0.9."""
    engine.generate(prompts[:1], gen_length=gen_lengths[:1], use_cache=use_cache)  # warm-up
    tokens, elapsed = 0, 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        gens = engine.generate(prompts, threshold=0.9, gen_length=gen_lengths, use_cache=use_cache)
        elapsed += time.perf_counter() - t0
        tokens += sum(len(g.token_ids) for g in gens)
    return tokens / elapsed


def longest_instances(n: int, seed: int = 0):
    task = TASKS["arith"]
    rng = random.Random(seed)
    return [task.sample(rng, max(task.sizes)) for _ in range(n)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m dilaserve.bench engine", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    p.add_argument("--quick", action="store_true", help="small suite, one repeat (under a minute)")
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args(argv)
    engine = DenoisingEngine.from_pretrained(args.checkpoint)
    repeats = 1 if args.quick else 2

    mixed = task_suite(12, seed=1)
    random.Random(0).shuffle(mixed)
    tps = {}
    for bs in (1, 8, 32):
        chunk = (mixed * 3)[:bs]
        tps[str(bs)] = throughput(engine, [x.prompt for x in chunk], [x.gen_length for x in chunk], True, repeats)

    longest = longest_instances(8 if args.quick else 32)
    prompts, lengths = [x.prompt for x in longest], [x.gen_length for x in longest]
    cached = throughput(engine, prompts, lengths, True, repeats)
    recompute = throughput(engine, prompts, lengths, False, repeats)

    suite = task_suite(10 if args.quick else 50, seed=2024)
    rows = quality_table(engine, suite, list(THRESHOLDS) + [math.inf])
    result = {
        "tokens_per_s": {k: round(v, 1) for k, v in tps.items()},
        "cache_speedup": round(cached / recompute, 3),
        "cache_tokens_per_s": {"dual_cache": round(cached, 1), "recompute_every_step": round(recompute, 1), "batch": len(longest)},
        "batch_speedup": round(tps["32"] / tps["1"], 3),
        "accuracy": {r.label: round(r.accuracy, 4) for r in rows},
        "mean_steps": {r.label: round(r.mean_steps, 2) for r in rows},
        "suite_size": len(suite),
        "checkpoint": engine.lm.name,
        "quick": args.quick,
        "machine": machine_info(),
    }
    emit(result, args.json)
    return 0
