"""Rollouts: decode prompts step by step and record what the predictor and simulator need.

Each *job* is one prompt decoded under a threshold policy: a fixed threshold (the
step-feature table, the quality table) or a random per-step mix (quality of dynamic
thresholds). All jobs advance together through :meth:`DenoisingEngine.step`, which takes
one threshold per request, so a whole rollout set costs one batched step per iteration.

Per step, a row records the request's progress features *before* the step (what a predictor
sees when it must predict), the step's outcome (kind, tokens committed, the confidence
statistics it computed), and the label: steps remaining including this one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from dilaserve.engine import DenoisingEngine, RequestState
from dilaserve.predict.features import FEATURE_NAMES
from dilaserve.predict.prompts import Prompt

#: Progress features stored per row, in ``RequestState.progress_features`` order after output length.
PROGRESS_COLUMNS: tuple[str, ...] = FEATURE_NAMES[2:]
CONF_COLUMNS: tuple[str, ...] = tuple(c for c in FEATURE_NAMES if c.startswith("conf_"))
#: Confidence statistics computed by the step itself (equal to the next row's ``conf_*``).
STEP_CONF_COLUMNS: tuple[str, ...] = tuple("step_" + c for c in CONF_COLUMNS)

#: A threshold policy: called before every step of a job with its state and the job's RNG.
ThresholdPolicy = Callable[[RequestState, random.Random], float]


def fixed(threshold: float) -> ThresholdPolicy:
    return lambda state, rng: threshold


def mixed(thresholds: Sequence[float]) -> ThresholdPolicy:
    """Draw every step's threshold uniformly from ``thresholds``."""
    choices = list(thresholds)
    return lambda state, rng: rng.choice(choices)


@dataclass(frozen=True)
class Job:
    prompt: Prompt
    policy: ThresholdPolicy
    #: Stored in the ``threshold`` column; NaN for a mixed policy.
    label: float


@dataclass
class RolloutResult:
    """``steps``: one row per step (schema: :mod:`dilaserve.predict.schema`);
    ``requests``: one row per job (steps, graded correctness, thresholds used)."""

    steps: pl.DataFrame
    requests: pl.DataFrame


def fixed_threshold_jobs(prompts: Sequence[Prompt], thresholds: Sequence[float]) -> list[Job]:
    return [Job(p, fixed(t), float(t)) for p in prompts for t in thresholds]


def mixed_threshold_jobs(prompts: Sequence[Prompt], thresholds: Sequence[float]) -> list[Job]:
    return [Job(p, mixed(thresholds), math.nan) for p in prompts]


def run_rollouts(
    engine: DenoisingEngine,
    jobs: Sequence[Job],
    block_length: int = 32,
    batch_size: int = 64,
    use_cache: bool = True,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> RolloutResult:
    """Decode every job to completion and return its step rows and per-request outcome.

    ``progress(done, total)`` is called as jobs finish (for logs or a progress bar).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size}: use at least 1")
    states = [
        engine.new_request(
            j.prompt.text, j.prompt.gen_length, block_length, use_cache, request_id=f"{j.prompt.request_id}@{i}"
        )
        for i, j in enumerate(jobs)
    ]
    rngs = [random.Random(seed * 1_000_003 + i) for i in range(len(jobs))]
    rows: list[list[tuple]] = [[] for _ in jobs]
    # Similar canvas lengths step together: less padding in recompute passes.
    active = sorted(range(len(jobs)), key=lambda i: states[i].num_tokens)
    done = 0
    while active:
        for lo in range(0, len(active), batch_size):
            chunk = active[lo : lo + batch_size]
            before = [states[i].progress_features() for i in chunk]
            thr = [float(jobs[i].policy(states[i], rngs[i])) for i in chunk]
            results = engine.step([states[i] for i in chunk], thr)
            for i, feats, t, res in zip(chunk, before, thr, results):
                if res.error:
                    raise RuntimeError(f"rollout of {jobs[i].prompt.request_id} failed: {res.error}")
                st = states[i]
                rows[i].append((t, *feats[1:], res.kind.value, res.committed, *st.conf_stats))
        still = [i for i in active if not states[i].finished]
        if progress is not None and len(still) < len(active):
            done += len(active) - len(still)
            progress(done, len(jobs))
        active = still
    return RolloutResult(_steps_frame(jobs, states, rows), _requests_frame(engine, jobs, states))


def _steps_frame(jobs: Sequence[Job], states: Sequence[RequestState], rows: list[list[tuple]]) -> pl.DataFrame:
    cols = ("step_threshold", *PROGRESS_COLUMNS, "step_kind", "tokens_committed", *STEP_CONF_COLUMNS)
    data: dict[str, list] = {
        c: [] for c in ("request_id", "threshold", "block_length", "output_length", "step", "label", *cols)
    }
    for job, st, rr in zip(jobs, states, rows):
        n = len(rr)
        data["request_id"] += [job.prompt.request_id] * n
        data["threshold"] += [job.label] * n
        data["block_length"] += [st.block_length] * n
        data["output_length"] += [st.gen_length] * n
        data["step"] += list(range(n))
        data["label"] += list(range(n, 0, -1))
        for c, values in zip(cols, zip(*rr) if rr else [()] * len(cols)):
            data[c] += list(values)
    frame = pl.DataFrame(
        data,
        schema_overrides={
            "block_length": pl.Int64,
            "output_length": pl.Int64,
            "step": pl.Int64,
            "label": pl.Int64,
            "tokens_committed": pl.Int64,
            "step_kind": pl.Utf8,
        },
    )
    # A fixed-threshold job's per-step threshold is its threshold: keep one column.
    if all(not math.isnan(j.label) for j in jobs):
        frame = frame.drop("step_threshold")
    return frame


def _requests_frame(engine: DenoisingEngine, jobs: Sequence[Job], states: Sequence[RequestState]) -> pl.DataFrame:
    recs = []
    for job, st in zip(jobs, states):
        text = engine.decode(st)
        recs.append(
            {
                "request_id": job.prompt.request_id,
                "source": job.prompt.source,
                "threshold": job.label,
                "output_length": st.gen_length,
                "steps": st.steps_done,
                "recompute_steps": st.recompute_steps_done,
                "mean_threshold": float(np.mean(st.thresholds_used)),
                "correct": bool(job.prompt.grade(text)),
                "text": text,
            }
        )
    return pl.DataFrame(recs)


def dipped(thresholds: Sequence[float], dip_prob: float) -> ThresholdPolicy:
    """A request-level top threshold (drawn uniformly from ``thresholds`` at the first step)
    from which each step dips, with probability ``dip_prob``, to a lower candidate drawn
    uniformly: mild per-step variation, as an adaptive controller produces, next to the
    uniform mix's extreme (``dip_prob`` 0: fixed thresholds; 1 below the top: all dips)."""
    if not 0.0 <= dip_prob <= 1.0:
        raise ValueError(f"dip_prob={dip_prob}: give a probability in [0, 1]")
    choices = sorted(thresholds)
    tops: dict[int, float] = {}

    def policy(state: RequestState, rng: random.Random) -> float:
        if id(state) not in tops:
            tops[id(state)] = rng.choice(choices)
        top = tops[id(state)]
        lower = [t for t in choices if t < top]
        return rng.choice(lower) if lower and rng.random() < dip_prob else top

    return policy


def dipped_threshold_jobs(prompts: Sequence[Prompt], thresholds: Sequence[float], dip_prob: float) -> list[Job]:
    return [Job(p, dipped(thresholds, dip_prob), math.nan) for p in prompts]


def switched(thresholds: Sequence[float], max_switch_step: int = 8) -> ThresholdPolicy:
    """One threshold for a request's first steps, another (drawn distinct) from a random step
    in ``1..max_switch_step`` on: a request slowed down or sped up mid-way, in either
    direction, so a fit can tell early steps' thresholds from late ones'."""
    if len(set(thresholds)) < 2 or max_switch_step < 1:
        raise ValueError(
            f"switched needs two distinct thresholds and max_switch_step >= 1 (got {list(thresholds)}, "
            f"{max_switch_step})"
        )
    choices = sorted(set(thresholds))
    plans: dict[int, tuple[float, float, int]] = {}

    def policy(state: RequestState, rng: random.Random) -> float:
        if id(state) not in plans:
            first, then = rng.sample(choices, 2)
            plans[id(state)] = (first, then, rng.randint(1, max_switch_step))
        first, then, at = plans[id(state)]
        return first if state.steps_done < at else then

    return policy


def switched_threshold_jobs(prompts: Sequence[Prompt], thresholds: Sequence[float]) -> list[Job]:
    return [Job(p, switched(thresholds), math.nan) for p in prompts]
