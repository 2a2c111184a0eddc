"""Decode the task suite at several thresholds and grade it: the speed-quality table of a checkpoint
(the model card, the demo and the engine benchmark read it)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from dilaserve.engine import DenoisingEngine
from dilaserve.tasks import TASKS, TaskInstance


@dataclass
class QualityRow:
    threshold: float  # math.inf stands for the one-token-per-step reference
    accuracy: float
    mean_steps: float
    n: int
    #: accuracy per task name, for the tasks in the suite
    by_task: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "sequential" if math.isinf(self.threshold) else f"{self.threshold:g}"


def decode_suite(engine: DenoisingEngine, suite: Sequence[TaskInstance], threshold: float, batch_size: int = 64, use_cache: bool = True):
    """Decode every instance (batched) and return (generations, graded correctness)."""
    gens, correct = [], []
    seq = math.isinf(threshold)
    for i in range(0, len(suite), batch_size):
        chunk = suite[i : i + batch_size]
        out = engine.generate(
            [x.prompt for x in chunk], threshold=1.0 if seq else threshold, gen_length=[x.gen_length for x in chunk],
            use_cache=use_cache, sequential=seq,
        )
        gens.extend(out)
        correct.extend(TASKS[x.task].grade(x, g.text) for x, g in zip(chunk, out))
    return gens, correct


def quality_table(engine: DenoisingEngine, suite: Sequence[TaskInstance], thresholds: Sequence[float], batch_size: int = 64) -> list[QualityRow]:
    rows = []
    for thr in thresholds:
        gens, correct = decode_suite(engine, suite, thr, batch_size)
        by_task = {name: sum(c for x, c in zip(suite, correct) if x.task == name) / sum(x.task == name for x in suite)
                   for name in sorted({x.task for x in suite})}
        rows.append(QualityRow(thr, sum(correct) / len(correct), sum(g.steps for g in gens) / len(gens), len(gens), by_task))
    return rows
