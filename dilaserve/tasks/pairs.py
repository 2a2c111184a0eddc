"""``pairs``: for each letter write the relation to its successor, in any order.

Each item is ``c > d`` (canonical) or ``d < c``: two forms of one fact. The
form is a per-item choice, so parallel commits can mix the forms inside one
item and break it.

No prompt letter is the successor of another (``pairs : c d`` is never drawn).
A small model tells which items are written by which prompt letters appear in
the answer, as in ``list``; when ``d`` was both a letter of its own and the
successor in ``c > d``, an item that was written looked done and another was
written twice (most losses at threshold 0.7 were such duplicates).
"""

from __future__ import annotations

import random
import string

from .base import Task, TaskInstance, gen_length_for

LETTERS = string.ascii_lowercase
#: Share of training answers that write an item in its canonical form. Above 0.7, so
#: that a form is committed alone at 0.9 but together with the rest at 0.7 and below:
#: both forms' tokens then follow the same (canonical) argmax and cannot mix.
CANONICAL = 0.8


def _spaced_letters(rng: random.Random, n: int) -> list[str]:
    """``n`` distinct letters, none the (cyclic) successor of another."""
    while True:
        letters = rng.sample(LETTERS, n)
        idx = {LETTERS.index(c) for c in letters}
        if not any((i + 1) % 26 in idx for i in idx):
            return letters


class Pairs(Task):
    name = "pairs"

    @property
    def sizes(self) -> range:
        return range(2, 7)

    def sample(self, rng: random.Random, size: int | None = None) -> TaskInstance:
        n = size if size is not None else rng.choice(self.sizes)
        letters = _spaced_letters(rng, n)
        alts = []
        for c in letters:
            d = LETTERS[(LETTERS.index(c) + 1) % 26]
            alts.append(((c, ">", d, ","), (d, "<", c, ",")))
        return TaskInstance(
            task=self.name,
            prompt="pairs : " + " ".join(letters),
            items=tuple(a[0] for a in alts),
            alternatives=tuple(alts),
            form_probs=((CANONICAL, 1 - CANONICAL),) * n,
            gen_length=gen_length_for(4 * n),
        )
