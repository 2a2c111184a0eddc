"""``arith``: GSM8K-like multi-step arithmetic that writes its steps.

The prompt lists problems ``a op b op c`` over single digits (every
intermediate result stays a single digit). The answer works each problem in
two written steps, ``a op b = x , x op c = y ;``, the problems in any order.
Commutative steps may also be written with their operands swapped, a second
valid form that the grader accepts.
"""
from __future__ import annotations

import itertools
import random

from .base import Task, TaskInstance, gen_length_for

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
COMMUTATIVE = {"+", "*"}


def _valid_steps() -> dict[int, list[tuple[int, str, int, int]]]:
    """All single-digit steps (a, op, b, result) grouped by left operand."""
    by_left: dict[int, list] = {a: [] for a in range(10)}
    for a, b, op in itertools.product(range(10), range(10), OPS):
        r = OPS[op](a, b)
        if 0 <= r <= 9 and not (op == "*" and (a < 2 or b < 2)):
            by_left[a].append((a, op, b, r))
    return by_left


STEPS = _valid_steps()


#: Share of training answers that write a commutative step in canonical order.
CANONICAL = 0.7


def _step_forms(a: int, op: str, b: int, r: int, end: str) -> list[tuple[tuple[str, ...], float]]:
    """Written forms of one step with their training frequency."""
    canonical = (str(a), op, str(b), "=", str(r), end)
    if op in COMMUTATIVE and a != b:
        return [(canonical, CANONICAL), ((str(b), op, str(a), "=", str(r), end), 1 - CANONICAL)]
    return [(canonical, 1.0)]


class Arith(Task):
    name = "arith"

    @property
    def sizes(self) -> range:
        return range(1, 9)

    def sample(self, rng: random.Random, size: int | None = None) -> TaskInstance:
        n = size if size is not None else rng.choice(self.sizes)
        problems, alts, probs = [], [], []
        for _ in range(n):
            a, op1, b, x = rng.choice([s for v in STEPS.values() for s in v])
            _, op2, c, y = rng.choice(STEPS[x])
            problems.append(f"{a} {op1} {b} {op2} {c}")
            # An item's forms: both steps, each in any of its written forms.
            forms = [(f1 + f2, p1 * p2) for f1, p1 in _step_forms(a, op1, b, x, ",") for f2, p2 in _step_forms(x, op2, c, y, ";")]
            alts.append(tuple(f for f, _ in forms))
            probs.append(tuple(p for _, p in forms))
        return TaskInstance(
            task=self.name, prompt="arith : " + " , ".join(problems), items=tuple(f[0] for f in alts),
            alternatives=tuple(alts), form_probs=tuple(probs),
            gen_length=gen_length_for(12 * n),
        )
