"""Prompt sets for offline rollouts: the synthetic tasks or GSM8K (for real checkpoints).

A :class:`Prompt` carries what a rollout needs (text, generation length) and what grading
needs (the task instance, or GSM8K's final number), so rollouts and the quality table can
be produced from either set by the same code.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from pathlib import Path

from dilaserve.tasks import TASKS, TaskInstance, task_suite

#: GSM8K test set shipped with the repo (see data/README.md for its licence).
GSM8K_PATH = Path(__file__).resolve().parents[2] / "data" / "gsm8k" / "test.jsonl"

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Prompt:
    """One request of a prompt set."""

    request_id: str
    text: str
    gen_length: int
    #: Task name, or ``"gsm8k"``.
    source: str
    #: What grading compares against: a synthetic :class:`TaskInstance` or GSM8K's number.
    reference: TaskInstance | str

    def grade(self, answer: str) -> bool:
        if isinstance(self.reference, TaskInstance):
            return TASKS[self.reference.task].grade(self.reference, answer)
        return _last_number(answer) == self.reference


def _last_number(text: str) -> str | None:
    found = _NUMBER.findall(text.replace(" ", ""))
    return found[-1].replace(",", "").rstrip(".") if found else None


def synthetic_prompts(n: int, seed: int = 0) -> list[Prompt]:
    """About ``n`` synthetic task prompts, spread evenly over the tasks."""
    if n < 1:
        raise ValueError(f"n={n}: ask for at least one prompt")
    per_task = max(1, -(-n // len(TASKS)))
    suite = task_suite(per_task, seed=seed)
    random.Random(seed).shuffle(suite)
    return [
        Prompt(f"{inst.task}-{i:04d}", inst.prompt, inst.gen_length, inst.task, inst)
        for i, inst in enumerate(suite[:n])
    ]


def gsm8k_prompts(n: int, seed: int = 0, gen_length: int = 256, path: Path = GSM8K_PATH) -> list[Prompt]:
    """``n`` GSM8K test questions (random, seeded), graded by their final number."""
    if not path.is_file():
        raise FileNotFoundError(f"GSM8K test set not found at {path}: it ships in data/gsm8k/test.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    picked = random.Random(seed).sample(range(len(rows)), min(n, len(rows)))
    return [
        Prompt(
            f"gsm8k-{i:04d}",
            rows[i]["question"],
            gen_length,
            "gsm8k",
            rows[i]["answer"].split("####")[-1].strip().replace(",", ""),
        )
        for i in picked
    ]


def load_prompts(prompt_set: str, n: int, seed: int = 0, gen_length: int = 256) -> list[Prompt]:
    """Dispatch on the prompt-set name (``synthetic`` or ``gsm8k``)."""
    if prompt_set == "synthetic":
        return synthetic_prompts(n, seed)
    if prompt_set == "gsm8k":
        return gsm8k_prompts(n, seed, gen_length)
    raise ValueError(
        f"unknown prompt set {prompt_set!r}: use 'synthetic' (embedded model) or 'gsm8k' (real checkpoints)"
    )
