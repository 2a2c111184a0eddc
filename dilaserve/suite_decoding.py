"""Decode the task suite at several thresholds and grade it: the speed-quality table of a checkpoint
(the model card, the demo and the engine benchmark read it)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from dilaserve.engine import DenoisingEngine
from dilaserve.tasks import BLOCK_LENGTH, TASKS, TaskInstance

#: Canvas lengths of :func:`accuracy_by_canvas`, as multiples of each task's own generation length.
CANVAS_FACTORS = (1, 2, 3)


@dataclass
class QualityRow:
    threshold: float  # math.inf stands for the one-token-per-step reference
    accuracy: float
    mean_steps: float
    n: int
    #: accuracy per task name, for the tasks in the suite
    by_task: dict[str, float] = field(default_factory=dict)
    #: tokens committed per step (answer and EOS alike), over the whole suite
    tokens_per_step: float = 0.0

    @property
    def label(self) -> str:
        return "sequential" if math.isinf(self.threshold) else f"{self.threshold:g}"


def decode_suite(
    engine: DenoisingEngine,
    suite: Sequence[TaskInstance],
    threshold: float,
    batch_size: int = 64,
    use_cache: bool = True,
    gen_lengths: Sequence[int] | None = None,
):
    """Decode every instance (batched) and return (generations, graded correctness).

    ``gen_lengths`` overrides the canvas per instance (default: each task's own generation length).
    """
    gens, correct = [], []
    seq = math.isinf(threshold)
    lengths = list(gen_lengths) if gen_lengths is not None else [x.gen_length for x in suite]
    for i in range(0, len(suite), batch_size):
        chunk = suite[i : i + batch_size]
        out = engine.generate(
            [x.prompt for x in chunk],
            threshold=1.0 if seq else threshold,
            gen_length=lengths[i : i + batch_size],
            use_cache=use_cache,
            sequential=seq,
        )
        gens.extend(out)
        correct.extend(TASKS[x.task].grade(x, g.text) for x, g in zip(chunk, out))
    return gens, correct


def accuracy_per_task(suite: Sequence[TaskInstance], correct: Sequence[bool]) -> dict[str, float]:
    """Share of correct answers per task name, for the tasks in the suite."""
    return {
        name: sum(c for x, c in zip(suite, correct) if x.task == name) / sum(x.task == name for x in suite)
        for name in sorted({x.task for x in suite})
    }


def quality_table(
    engine: DenoisingEngine, suite: Sequence[TaskInstance], thresholds: Sequence[float], batch_size: int = 64
) -> list[QualityRow]:
    rows = []
    for thr in thresholds:
        gens, correct = decode_suite(engine, suite, thr, batch_size)
        by_task = accuracy_per_task(suite, correct)
        steps = sum(g.steps for g in gens)
        rows.append(
            QualityRow(
                thr,
                sum(correct) / len(correct),
                steps / len(gens),
                len(gens),
                by_task,
                sum(g.tokens_committed for g in gens) / max(1, steps),
            )
        )
    return rows


def scaled_canvas(engine: DenoisingEngine, inst: TaskInstance, factor: int, block_length: int = BLOCK_LENGTH) -> int:
    """``factor`` times the instance's own generation length, capped at whole blocks that fit the context."""
    room = (engine.lm.max_context - len(engine.encode(inst.prompt))) // block_length * block_length
    return min(factor * inst.gen_length, max(inst.gen_length, room))


def accuracy_by_canvas(
    engine: DenoisingEngine,
    suite: Sequence[TaskInstance],
    factors: Sequence[int] = CANVAS_FACTORS,
    threshold: float = 0.9,
    batch_size: int = 64,
) -> dict[str, dict]:
    """Accuracy (overall and per task) with the canvas at each factor times every task's own
    generation length: a model that answers in any canvas long enough keeps its accuracy, as a
    client's generous ``max_tokens`` leaves the rest of the canvas to EOS."""
    out = {}
    for k in factors:
        _, correct = decode_suite(
            engine, suite, threshold, batch_size, gen_lengths=[scaled_canvas(engine, x, k) for x in suite]
        )
        by_task = accuracy_per_task(suite, correct)
        out[str(k)] = {"accuracy": sum(correct) / len(correct), "by_task": by_task}
    return out
