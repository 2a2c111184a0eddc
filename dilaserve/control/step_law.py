"""The step law: how many denoising steps a block takes at each threshold.

A DLM decodes its canvas block by block. At threshold ``c`` a block of ``B`` tokens takes
``S_c`` steps on average (``S_c ~ B / T_c``, ``T_c`` the mean tokens committed per step),
and exactly one of them is a recompute step (it starts the block and runs the whole
canvas); the other ``S_c - 1`` are cache steps (they run the block only). Every capacity
and latency formula of the control plane prices work with this mix (see
``docs/architecture.md``, control algorithms): load control's instance capacity, stage 1 of
reconfiguration and the nominal capacity of a static cluster.

The law comes from the recorded step dynamics where they exist (the exact expected steps
per block of their Markov chain, :meth:`~dilaserve.sim.replay.ReplayTable.block_steps`),
else from a per-threshold tokens-per-step or steps-per-token table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the replay table lives in the simulator package, which imports control
    from dilaserve.sim.replay import ReplayTable


@dataclass(frozen=True)
class StepLaw:
    """Expected steps per block at each recorded threshold, interpolated in between.

    Attributes:
        block_length: tokens per block ``B`` (the served model's block length).
        thresholds: recorded thresholds, strictly increasing.
        steps_per_block: expected steps ``S_c`` to decode one block at each threshold,
            aligned with ``thresholds``; each in ``[1, B]`` (a step commits at least one
            token, and at most the whole block).
    """

    block_length: int
    thresholds: tuple[float, ...]
    steps_per_block: tuple[float, ...]

    def __post_init__(self) -> None:
        thr = tuple(float(t) for t in self.thresholds)
        steps = tuple(float(s) for s in self.steps_per_block)
        object.__setattr__(self, "thresholds", thr)
        object.__setattr__(self, "steps_per_block", steps)
        if self.block_length < 1:
            raise ValueError(
                f"StepLaw.block_length={self.block_length}: give the model's block length in tokens (e.g. 32)"
            )
        if not thr or len(thr) != len(steps):
            raise ValueError(
                f"StepLaw needs one steps-per-block value per threshold: got {len(thr)} "
                f"thresholds and {len(steps)} values"
            )
        if any(b <= a for a, b in zip(thr, thr[1:])):
            raise ValueError(f"StepLaw.thresholds {thr} must be strictly increasing")
        bad = [s for s in steps if not 1.0 <= s <= self.block_length + 1e-9]
        if bad:
            raise ValueError(
                f"StepLaw.steps_per_block {steps} has {bad} outside [1, {self.block_length}]: a block "
                "takes at least one step and at most one per token; check the tokens-per-step table"
            )

    # ------------------------------------------------------------ constructors
    @classmethod
    def from_replay(cls, table: ReplayTable, block_length: int, thresholds: Iterable[float] | None = None) -> StepLaw:
        """The exact expected steps per block of the recorded dynamics, at ``thresholds``
        (default: the recorded ones; others take the nearest recorded threshold's value,
        as the replay does)."""
        thr = sorted(float(t) for t in (table.thresholds if thresholds is None else thresholds))
        return cls(int(block_length), tuple(thr), tuple(float(table.block_steps(t, block_length)[0]) for t in thr))

    @classmethod
    def from_dynamics(cls, dynamics, block_length: int, thresholds: Iterable[float] | None = None) -> StepLaw:
        """:meth:`from_replay` over a :class:`~dilaserve.predict.dynamics.StepDynamics`."""
        from dilaserve.sim.replay import ReplayTable

        return cls.from_replay(ReplayTable(dynamics), block_length, thresholds)

    @classmethod
    def from_tokens_per_step(cls, tokens_per_step: Mapping[float, float], block_length: int) -> StepLaw:
        """``S_c = B / T_c``, clipped to ``[1, B]``."""
        if not tokens_per_step:
            raise ValueError("the tokens-per-step table is empty: give T_c for at least one threshold")
        thr = sorted(float(t) for t in tokens_per_step)
        b = int(block_length)
        return cls(b, tuple(thr), tuple(min(float(b), max(1.0, b / float(tokens_per_step[t]))) for t in thr))

    @classmethod
    def from_steps_per_token(cls, steps_per_token: Mapping[float, float], block_length: int) -> StepLaw:
        """``S_c = B x steps per token`` (the threshold-quality table's column), clipped to ``[1, B]``."""
        return cls.from_tokens_per_step({t: 1.0 / s for t, s in steps_per_token.items()}, block_length)

    # ------------------------------------------------------------ queries
    def steps(self, threshold: float) -> float:
        """Expected steps per block at ``threshold`` (linear between recorded thresholds,
        the end values outside them)."""
        return float(np.interp(float(threshold), self.thresholds, self.steps_per_block))

    def cache_steps(self, threshold: float) -> float:
        """Expected cache steps per block: every step but the block's one recompute step."""
        return self.steps(threshold) - 1.0

    def tokens_per_step(self, threshold: float) -> float:
        """Effective ``T_c = B / S_c``: tokens committed per step over whole blocks."""
        return self.block_length / self.steps(threshold)

    def tokens_per_step_at(self, thresholds: Iterable[float]) -> dict[float, float]:
        return {float(t): self.tokens_per_step(t) for t in thresholds}

    def request_steps(self, gen_length: float, threshold: float) -> float:
        """Expected steps of a canvas of ``gen_length`` tokens (whole blocks) at ``threshold``."""
        return gen_length / self.block_length * self.steps(threshold)


#: Steps per output token at each threshold of a typical rollout table of the embedded
#: model. Configs built before any artifact is loaded (the reconfigurator's placeholder
#: ``T_c``, the control benchmark) use it; serving replaces it with the measured law.
TYPICAL_STEPS_PER_TOKEN: dict[float, float] = {0.5: 0.31, 0.6: 0.37, 0.7: 0.45, 0.8: 0.56, 0.9: 0.71}


def typical_tokens_per_step(thresholds: Iterable[float], block_length: int = 32) -> dict[float, float]:
    """``T_c`` of :data:`TYPICAL_STEPS_PER_TOKEN` at ``thresholds`` (interpolated between its
    entries), so a placeholder table always covers the candidate set it is built for."""
    return StepLaw.from_steps_per_token(TYPICAL_STEPS_PER_TOKEN, block_length).tokens_per_step_at(thresholds)
