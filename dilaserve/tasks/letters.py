"""``list``: write the given letters back, in any order."""

from __future__ import annotations

import random
import string

from .base import Task, TaskInstance, gen_length_for


class ListLetters(Task):
    name = "list"

    @property
    def sizes(self) -> range:
        return range(2, 11)

    def sample(self, rng: random.Random, size: int | None = None) -> TaskInstance:
        n = size if size is not None else rng.choice(self.sizes)
        letters = rng.sample(string.ascii_lowercase, n)
        items = tuple((c,) for c in letters)
        return TaskInstance(
            task=self.name,
            prompt="list : " + " ".join(letters),
            items=items,
            alternatives=tuple((i,) for i in items),
            form_probs=((1.0,),) * n,
            gen_length=gen_length_for(n),
        )
