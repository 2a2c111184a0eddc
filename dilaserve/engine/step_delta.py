"""The step wire format of a remote instance: each request's state stays where it is stepped.

A remote instance (``RayBackend``'s workers) keeps the state of every request it steps, in
:class:`HeldStates`. The driver sends a request's whole state (``RequestState.to_bytes``)
only when the instance does not hold it as the driver knows it: a request new there, moved
there, or out of step. Otherwise a step carries its id and threshold alone. The instance
answers with what each step changed (:class:`StepReply`): the positions and tokens it
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

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .state import N_CONF_STATS, RequestState, StepKind

#: ``(request_id, error)`` of a request an instance refused to step.
StepError = tuple[str, str]


_KEY_FIELDS = ("steps_done", "block_index", "unmasked_in_block", "block_cached", "append_pending", "finished")


def sync_key(state: RequestState) -> tuple[int, ...]:
    """What must agree between the driver's and the instance's copy of a request after a
    step (the canvas is covered by the counters: commits only fill the current block)."""
    return tuple(int(getattr(state, f)) for f in _KEY_FIELDS)


#: ``StepReply.outcome`` codes: the request did not change, it stepped once (a recompute or
#: a cache step), or it changed some other way and ``StepReply.states`` carries it whole.
UNCHANGED, RECOMPUTED, CACHED, WHOLE = 0, 1, 2, 3
_KIND_CODE = {StepKind.RECOMPUTE: RECOMPUTED, StepKind.CACHE: CACHED}
_CODE_KIND = {v: k for k, v in _KIND_CODE.items()}


@dataclass(frozen=True)
class StepReply:
    """An instance's answer to one step, one row per request in the order sent, in columns
    (a few numpy arrays pickle in microseconds where one object per request took a
    millisecond at batch 32).

    A request's ``outcome`` says what happened to it: UNCHANGED (the instance refused it, see
    ``errors``), RECOMPUTED or CACHED (it stepped once: its commits are its slice of
    ``positions`` / ``tokens``, ``counts`` long, with its threshold and confidence statistics),
    or WHOLE (it changed in some other way; ``states`` holds it as bytes).
    """

    outcome: np.ndarray  # (n,) int8
    counts: np.ndarray  # (n,) int64: commits per request
    positions: np.ndarray  # (sum(counts),) response positions committed, request after request
    tokens: np.ndarray  # (sum(counts),) the tokens committed there
    thresholds: np.ndarray  # (n,) float64
    conf_stats: np.ndarray  # (n, N_CONF_STATS) float64
    #: :func:`sync_key` of each instance copy after the step, (n, 6) int64
    keys: np.ndarray
    #: row -> whole state (``RequestState.to_bytes``) of the WHOLE rows
    states: dict[int, bytes]
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
        before = [(sync_key(st), st.steps_done) for st in states]
        for st in states:
            st.last_commit = None
        t0 = time.perf_counter()
        results = engine.step(states, [by_id[rid] for rid in held]) if states else []
        engine_s = time.perf_counter() - t0
        n = len(request_ids)
        row = {rid: i for i, rid in enumerate(request_ids)}
        outcome = np.zeros(n, dtype=np.int8)
        counts = np.zeros(n, dtype=np.int64)
        thr = np.zeros(n)
        conf = np.zeros((n, N_CONF_STATS))
        keys = np.zeros((n, len(_KEY_FIELDS)), dtype=np.int64)
        positions, tokens, whole = [], [], {}
        for st, res, (key, steps) in zip(states, results, before):
            i = row[st.request_id]
            if res.error:
                errors.append((st.request_id, str(res.error)))
            commit = st.last_commit
            if commit is not None and st.steps_done == steps + 1:
                pos, tok, thr[i], kind, conf[i] = commit
                outcome[i], counts[i] = _KIND_CODE[kind], pos.size
                positions.append(pos)
                tokens.append(tok)
            elif sync_key(st) != key:
                outcome[i], whole[i] = WHOLE, st.to_bytes()
            keys[i] = sync_key(st)
            if st.finished:
                self._states.pop(st.request_id, None)
        return StepReply(
            outcome, counts, _cat(positions), _cat(tokens), thr, conf, keys, whole, tuple(errors), engine_s
        )


def successor(state: RequestState) -> RequestState:
    """A copy of ``state`` for the next step to write: a step's states go to other threads
    (the server streams from them), so a later step must never change them under a reader.
    Costs microseconds where ``from_bytes(to_bytes())`` costs tens."""
    new = copy.copy(state)
    new.response = state.response.copy()
    new.thresholds_used = list(state.thresholds_used)
    new.tokens_per_step = list(state.tokens_per_step)
    return new


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def adopt_reply(states: Sequence[RequestState], reply: StepReply) -> tuple[list[RequestState], list[str]]:
    """The driver's side of :meth:`HeldStates.step`: ``states`` (in the order sent) after the
    step, as new objects where the step changed them (``states`` stay as they were), and the
    ids whose copies no longer agree (their next step must carry their state)."""
    out, diverged = [], []
    ends = np.cumsum(reply.counts)
    for i, st in enumerate(states):
        code = int(reply.outcome[i])
        if code in _CODE_KIND:
            lo, hi = int(ends[i] - reply.counts[i]), int(ends[i])
            st = successor(st)
            st.apply_step(
                reply.positions[lo:hi],
                reply.tokens[lo:hi],
                float(reply.thresholds[i]),
                _CODE_KIND[code],
                reply.conf_stats[i],
            )
            if sync_key(st) != tuple(int(v) for v in reply.keys[i]):
                diverged.append(st.request_id)
        elif code == WHOLE:
            st = RequestState.from_bytes(reply.states[i])
        out.append(st)
    return out, diverged
