"""``arith``: GSM8K-like multi-step arithmetic that writes its steps.

The prompt gives a two-step recipe over single digits and the numbers to apply
it to, written as words: ``arith : + 3 - 2 : four five`` reads "take four and
five, add 3 to each, then subtract 2". The answer works the recipe for every
number in two written steps behind the number's word,
``four 4 + 3 = 7 , 7 - 2 = 5 ;``, the numbers in the order the prompt gives
them, as a GSM8K solution works its problem's quantities in the order they are
stated. Every intermediate result stays a single digit. A commutative second
step may also be written with its operands swapped (``2 + 7``), a second valid
form that the grader accepts.

Why this shape, for a model of under a million parameters:

* one recipe for all numbers: when every number had its own operations, the
  model mixed the operations of different problems, since it cannot tell which
  problem an item works while most of the item is still masked;
* each item opens with its number's word: the words are the answer's only
  words, so "which numbers are done" can be read off the answer, exactly as the
  letters in ``list`` (digits cannot serve, as they also appear inside every
  item);
* the word is the number, not a label for it: with arbitrary letter labels
  (``k 4``) the model had to find each label in the prompt and copy the digit
  after it, a lookup it never learned (it paired labels and numbers at
  random); reading a digit off the word just before it is a fixed local map.

* the items come in the prompt's order: with free order, two open items were
  equally likely in two places, and at threshold 0.7 a step wrote the result
  digits of one into the item whose word belonged to the other (most of the
  task's losses there). Such a joint error is not in the per-token
  probabilities, so no threshold or temperature removes it; a fixed order
  leaves each position one answer, as most positions of real text have.

The two forms of a step keep a few genuinely ambiguous positions, and the
digits that wait on other digits still punish committing too early.
"""

from __future__ import annotations

import itertools
import random

from .base import Task, TaskInstance, gen_length_for

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
COMMUTATIVE = {"+", "*"}
#: The words that name the start numbers 0-9 (the tokenizer's vocabulary includes them).
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: Share of training answers that write a commutative step in canonical order (above
#: 0.7, as in ``pairs``: the form waits at threshold 0.9 and is safe to commit at 0.7).
CANONICAL = 0.8


def _valid(a: int, op: str, b: int) -> bool:
    """A single-digit step with a single-digit result (no trivial products)."""
    r = OPS[op](a, b)
    return 0 <= r <= 9 and not (op == "*" and (a < 2 or b < 2))


def _recipes() -> list[tuple[str, int, str, int, tuple[int, ...]]]:
    """Every recipe ``(op1, b, op2, c)`` with the start values it keeps single-digit."""
    out = []
    for op1, b, op2, c in itertools.product(OPS, range(10), OPS, range(10)):
        starts = tuple(a for a in range(10) if _valid(a, op1, b) and _valid(OPS[op1](a, b), op2, c))
        if starts:
            out.append((op1, b, op2, c, starts))
    return out


RECIPES = _recipes()
#: Recipes with at least n start values, by n (sampling runs per training sequence).
RECIPES_FOR_SIZE = {n: [r for r in RECIPES if len(r[4]) >= n] for n in range(1, 11)}


def _step_forms(a: int, op: str, b: int, r: int, end: str) -> list[tuple[tuple[str, ...], float]]:
    """Written forms of one step with their training frequency."""
    canonical = (str(a), op, str(b), "=", str(r), end)
    if op in COMMUTATIVE and a != b:
        return [(canonical, CANONICAL), ((str(b), op, str(a), "=", str(r), end), 1 - CANONICAL)]
    return [(canonical, 1.0)]


class Arith(Task):
    name = "arith"
    ordered = True

    @property
    def sizes(self) -> range:
        return range(1, 9)

    def sample(self, rng: random.Random, size: int | None = None) -> TaskInstance:
        n = size if size is not None else rng.choice(self.sizes)
        if n not in RECIPES_FOR_SIZE:
            raise ValueError(f"arith takes 1 to {max(RECIPES_FOR_SIZE)} numbers (single-digit starts), not {n}")
        op1, b, op2, c, starts = rng.choice(RECIPES_FOR_SIZE[n])
        alts, probs = [], []
        picks = rng.sample(starts, n)
        for a in picks:
            x = OPS[op1](a, b)
            y = OPS[op2](x, c)
            first = (NUMBER_WORDS[a], str(a), op1, str(b), "=", str(x), ",")
            # Only the second step has two forms: the digit after the word stays first.
            forms = _step_forms(x, op2, c, y, ";")
            alts.append(tuple(first + f for f, _ in forms))
            probs.append(tuple(p for _, p in forms))
        numbers = " ".join(NUMBER_WORDS[a] for a in picks)
        return TaskInstance(
            task=self.name,
            prompt=f"arith : {op1} {b} {op2} {c} : {numbers}",
            items=tuple(f[0] for f in alts),
            alternatives=tuple(alts),
            form_probs=tuple(probs),
            gen_length=gen_length_for(14 * n),
        )
