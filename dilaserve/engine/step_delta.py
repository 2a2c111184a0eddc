"""The step wire format of a remote instance: each request's state stays where it is stepped.

A remote instance (``RayBackend``'s workers) keeps the state of every request it steps, in
:class:`HeldStates`. The driver sends a request's whole state (``RequestState.to_bytes``)
only when the instance does not hold it as the driver knows it: a request new there, moved
there, or out of step. Otherwise a step carries its id and threshold alone. The instance
answers with what each step changed, a :class:`StepCommit`: the positions and tokens it
committed, the step's kind and its confidence statistics. The driver replays them with
:meth:`RequestState.apply_step`, the bookkeeping the engine itself ran, so the two copies
stay equal. Both sides compute a :func:`sync_key` after the step: where they differ, the
driver logs it and sends the whole state with the next step, which replaces the instance's.

Migration still moves a whole state, once: the destination does not hold the request, so
its first step there carries it. docs/architecture.md ("One control plane") describes the
round trip.

Numpy only: the driver imports this without torch.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .state import RequestState, StepKind

#: ``(request_id, error)`` of a request an instance refused to step.
StepError = tuple[str, str]


def sync_key(state: RequestState) -> tuple:
    """What must agree between the driver's and the instance's copy of a request after a
    step (the canvas is covered by the counters: commits only fill the current block)."""
    return (
        state.steps_done,
        state.block_index,
        state.unmasked_in_block,
        state.block_cached,
        state.append_pending,
        state.finished,
    )


@dataclass(frozen=True)
class StepCommit:
    """What one step did to one request, enough for the driver to replay it."""

    request_id: str
    #: response positions committed, and the tokens committed there
    positions: np.ndarray
    tokens: np.ndarray
    threshold: float
    kind: StepKind
    #: confidence statistics of the step (``RequestState.conf_stats``)
    conf_stats: np.ndarray
    #: :func:`sync_key` of the instance's copy after the step
    key: tuple

    def replay(self, state: RequestState) -> bool:
        """Apply the step to the driver's copy; whether both copies now agree."""
        state.apply_step(self.positions, self.tokens, self.threshold, self.kind, self.conf_stats)
        return sync_key(state) == self.key


@dataclass(frozen=True)
class StepReply:
    """An instance's answer to one step, one outcome per request in the order sent.

    An outcome is a :class:`StepCommit` (the request stepped once), None (it did not change:
    the instance refused it, see ``errors``) or the whole state as bytes (it changed in some
    other way, which the driver adopts as it is).
    """

    outcomes: tuple[StepCommit | bytes | None, ...]
    errors: tuple[StepError, ...]
    #: wall seconds of the engine's step on the instance (the rest of a round trip is transport)
    engine_s: float


class _Recording(RequestState):
    """A held state that remembers the arguments of its last :meth:`apply_step`."""

    last_commit: tuple | None = None

    def apply_step(self, positions, tokens, threshold, kind, conf_stats) -> None:
        super().apply_step(positions, tokens, threshold, kind, conf_stats)
        self.last_commit = (
            np.asarray(positions, dtype=np.int64),
            np.asarray(tokens, dtype=np.int64),
            float(threshold),
            kind,
            np.asarray(conf_stats, dtype=np.float64),
        )


class HeldStates:
    """The requests an instance holds, stepped in place by its engine."""

    def __init__(self) -> None:
        self._states: dict[str, _Recording] = {}

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._states

    def adopt(self, blobs: Sequence[bytes]) -> None:
        """Take whole states from the driver, replacing any copy held under the same id."""
        for blob in blobs:
            st = _Recording.from_bytes(blob)
            self._states[st.request_id] = st

    def release(self, request_ids: Sequence[str]) -> None:
        for rid in request_ids:
            self._states.pop(rid, None)

    def step(self, engine, request_ids: Sequence[str], thresholds: Sequence[float]) -> StepReply:
        """One ``engine.step`` over the held requests ``request_ids``. A request not held here
        is refused with an error (the driver then sends its whole state); a finished one is
        dropped after the step (the engine has already freed its cache)."""
        held = [rid for rid in request_ids if rid in self._states]
        errors: list[StepError] = [
            (rid, f"request {rid} is not held by this instance; its next step carries its state")
            for rid in request_ids
            if rid not in self._states
        ]
        by_id = dict(zip(request_ids, thresholds))
        states = [self._states[rid] for rid in held]
        before = {st.request_id: (sync_key(st), st.steps_done) for st in states}
        for st in states:
            st.last_commit = None
        t0 = time.perf_counter()
        results = engine.step(states, [by_id[rid] for rid in held]) if states else []
        engine_s = time.perf_counter() - t0
        outcomes: dict[str, StepCommit | bytes | None] = {rid: None for rid in request_ids}
        for st, res in zip(states, results):
            if res.error:
                errors.append((st.request_id, str(res.error)))
            key, steps = before[st.request_id]
            if st.last_commit is not None and st.steps_done == steps + 1:
                outcomes[st.request_id] = StepCommit(st.request_id, *st.last_commit, key=sync_key(st))
            elif sync_key(st) != key:
                outcomes[st.request_id] = st.to_bytes()
            if st.finished:
                self._states.pop(st.request_id, None)
        return StepReply(tuple(outcomes[rid] for rid in request_ids), tuple(errors), engine_s)


def adopt_reply(states: Sequence[RequestState], reply: StepReply) -> tuple[list[RequestState], list[str]]:
    """The driver's side of :meth:`HeldStates.step`: ``states`` (in the order sent) after the
    step, and the ids whose copies no longer agree (their next step must carry their state)."""
    out, diverged = [], []
    for st, outcome in zip(states, reply.outcomes):
        if isinstance(outcome, StepCommit):
            if not outcome.replay(st):
                diverged.append(st.request_id)
        elif isinstance(outcome, bytes):
            st = RequestState.from_bytes(outcome)
        out.append(st)
    return out, diverged
