"""``pairs``: for each letter write the relation to its successor, in any order.

Each item is ``c > d`` (canonical) or ``d < c``: two forms of one fact. The
form is a per-item choice, so parallel commits can mix the forms inside one
item and break it.
"""

from __future__ import annotations

import random
import string

from .base import Task, TaskInstance, gen_length_for

LETTERS = string.ascii_lowercase
#: Share of training answers that write an item in its canonical form.
CANONICAL = 0.7


class Pairs(Task):
    name = "pairs"

    @property
    def sizes(self) -> range:
        return range(2, 7)

    def sample(self, rng: random.Random, size: int | None = None) -> TaskInstance:
        n = size if size is not None else rng.choice(self.sizes)
        letters = rng.sample(LETTERS, n)
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
