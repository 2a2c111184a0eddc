"""Demonstration: decode task prompts with the embedded model at a few thresholds.

    python -m dilaserve.demo [--checkpoint PATH] [--per-task 4]

Prints each answer with its steps and grade, then accuracy and mean steps per
threshold: the speed-quality trade-off the serving system controls.
"""

from __future__ import annotations

import argparse

from dilaserve.engine import DEFAULT_CHECKPOINT, DenoisingEngine
from dilaserve.suite_decoding import decode_suite
from dilaserve.tasks import task_suite


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--checkpoint", default=str(DEFAULT_CHECKPOINT), help="checkpoint folder (default: the embedded model)"
    )
    p.add_argument("--per-task", type=int, default=4, help="prompts per task")
    p.add_argument("--thresholds", type=float, nargs="+", default=[0.9, 0.7, 0.5])
    p.add_argument("--seed", type=int, default=123)
    args = p.parse_args(argv)
    engine = DenoisingEngine.from_pretrained(args.checkpoint)
    suite = task_suite(args.per_task, seed=args.seed)
    summary = []
    for thr in args.thresholds:
        print(f"\n=== threshold {thr} ===")
        gens, correct = decode_suite(engine, suite, thr)
        for inst, g, ok in zip(suite, gens, correct):
            print(f"[{'ok' if ok else 'WRONG':5}] steps={g.steps:3d}  {inst.prompt}\n        -> {g.text}")
        summary.append((thr, sum(correct) / len(correct), sum(g.steps for g in gens) / len(gens)))
    print("\nthreshold  accuracy  mean_steps")
    for thr, acc, steps in summary:
        print(f"{thr:9.2f}  {acc:8.1%}  {steps:10.1f}")


if __name__ == "__main__":
    main()
