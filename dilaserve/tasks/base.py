"""Synthetic tasks with verifiable answers.

Each task instance has a prompt and a *set* of valid answers: items come in
any order (or, for an ordered task, in the one order the prompt gives) and
some items have alternative forms. That is where the speed-quality trade-off
of parallel decoding comes from. Committing many uncertain positions in one
step can mix incompatible answers (an item twice, another missing, half of one
form and half of another), while a one-token-per-step decode never does.
Graders accept every valid answer.
"""

from __future__ import annotations

import abc
import math
import random
from dataclasses import dataclass

BLOCK_LENGTH = 32


@dataclass(frozen=True)
class TaskInstance:
    task: str
    prompt: str
    #: Canonical items of the answer (each item a tuple of tokens), in the order an
    #: ordered task requires (free otherwise); ``alternatives`` lists the valid forms
    #: of each item.
    items: tuple[tuple[str, ...], ...]
    alternatives: tuple[tuple[tuple[str, ...], ...], ...]
    #: Probability of each form in training answers (parallel to alternatives).
    form_probs: tuple[tuple[float, ...], ...]
    gen_length: int

    @property
    def answer_length(self) -> int:
        """Tokens in every valid answer (all forms have the same length)."""
        return sum(len(i) for i in self.items)


def gen_length_for(answer_tokens: int, block_length: int = BLOCK_LENGTH) -> int:
    """Smallest whole number of blocks that holds the answer and one EOS."""
    return block_length * math.ceil((answer_tokens + 1) / block_length)


class Task(abc.ABC):
    """A family of instances: sampling, a random valid answer, and grading."""

    name: str
    #: True when the items must come in the order of ``TaskInstance.items`` (the order
    #: the prompt states them); False when any order of the items is valid.
    ordered: bool = False

    @abc.abstractmethod
    def sample(self, rng: random.Random, size: int | None = None) -> TaskInstance:
        """Draw an instance; ``size`` (number of items) is random when None."""

    @property
    @abc.abstractmethod
    def sizes(self) -> range:
        """Allowed numbers of items."""

    def sample_answer_items(self, inst: TaskInstance, rng: random.Random) -> list[tuple[str, ...]]:
        """A random valid answer, item by item (training masks whole items at a time): items
        shuffled (kept in order for an ordered task), each form drawn by weight."""
        order = list(range(len(inst.items)))
        if not self.ordered:
            rng.shuffle(order)
        return [rng.choices(inst.alternatives[i], weights=inst.form_probs[i])[0] for i in order]

    def grade(self, inst: TaskInstance, answer: str | list[str]) -> bool:
        """True iff ``answer`` is some order of the items (their own order, for an ordered
        task), each in a valid form."""
        return self.verdict(inst, answer).correct

    def verdict(self, inst: TaskInstance, answer: str | list[str]) -> Verdict:
        """The grade with its reasons: the expected answer, the first item that matches no
        remaining item, and the items the answer leaves out."""
        toks = answer.split() if isinstance(answer, str) else list(answer)
        remaining = list(range(len(inst.items)))
        pos = 0
        while pos < len(toks):
            # An ordered task's next item is the first remaining one, never a later one.
            for k, i in enumerate(remaining[:1] if self.ordered else remaining):
                match = next((f for f in inst.alternatives[i] if tuple(toks[pos : pos + len(f)]) == f), None)
                if match is not None:
                    pos += len(match)
                    remaining.pop(k)
                    break
            else:
                # Every form of an instance has the same length: show one item's worth of tokens.
                width = len(inst.items[remaining[0]]) if remaining else len(inst.items[0])
                return Verdict(
                    False,
                    _words(inst.items),
                    " ".join(toks[pos : pos + width]),
                    _words(inst.items[i] for i in remaining),
                    self.ordered,
                )
        return Verdict(not remaining, _words(inst.items), None, _words(inst.items[i] for i in remaining), self.ordered)


@dataclass(frozen=True)
class Verdict:
    """Why an answer is graded as it is (what a person reading the answer wants to know)."""

    correct: bool
    #: The canonical answer (any order of its items is valid too, unless ``in_order``).
    expected: str
    #: The first stretch of the answer that is no remaining item (None: every item matched).
    first_wrong: str | None
    #: Items the answer never wrote, space-separated ("" when none).
    missing: str
    #: True when the task takes its items only in the expected order.
    in_order: bool = False

    def markdown(self) -> str:
        """``**correct**``, or ``**wrong**`` with the first wrong item and the expected answer."""
        if self.correct:
            return "**correct**"
        parts = ["**wrong**"]
        if self.first_wrong:
            parts.append(f"first wrong item `{self.first_wrong}`")
        elif self.missing:
            parts.append(f"missing `{self.missing}`")
        order = "in this order" if self.in_order else "in any order"
        parts.append(f"expected `{self.expected}` (items {order})")
        return "; ".join(parts)


def _words(items) -> str:
    return " ".join(" ".join(item) for item in items)
