"""Registry of synthetic tasks."""

from __future__ import annotations

import random

from .arith import Arith
from .base import BLOCK_LENGTH, Task, TaskInstance, Verdict, gen_length_for
from .letters import ListLetters
from .pairs import Pairs

TASKS: dict[str, Task] = {t.name: t for t in (ListLetters(), Pairs(), Arith())}


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; choose one of {sorted(TASKS)}") from None


def task_suite(n_per_task: int, seed: int = 0) -> list[TaskInstance]:
    """A fixed evaluation suite: ``n_per_task`` instances of every task."""
    rng = random.Random(seed)
    return [t.sample(rng) for t in TASKS.values() for _ in range(n_per_task)]


__all__ = ["TASKS", "Task", "TaskInstance", "Verdict", "BLOCK_LENGTH", "gen_length_for", "get_task", "task_suite"]
