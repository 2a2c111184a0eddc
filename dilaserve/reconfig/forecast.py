"""What a plan made now must face: the rate of the coming interval, how long a layout holds
it, and which SLO tiers a layout cannot serve at all (docs/architecture.md, "Planning
ahead").

A plan made for the load just seen is wrong as soon as the load moves, so a plan's inputs
are the forecast of the next interval's rate (a line through the window's arrival counts,
carried forward) and the time the plan will hold before that forecast outgrows it. The
reach check says where planning ahead is needed at all: a tier whose SLO is below the
fastest a request of it can run alone on the layout's TP degrees, at the lowest threshold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dilaserve.control.step_law import step_split
from dilaserve.engine.state import StepKind
from dilaserve.profile.types import LatencyProfile
from dilaserve.reconfig.stage1 import CapacityProblem, capacity_rps


def forecast_rate(arrivals: Sequence[float], now: float, window_s: float, horizon_s: float, bins: int = 6) -> float:
    """The mean arrival rate (requests/s) over ``[now, now + horizon_s]``: a least-squares
    line through the arrival counts of ``bins`` equal stretches of the last ``window_s``,
    carried forward, never below zero. The window starts no earlier than its first arrival.
    With under two arrivals a bin it is the window's mean rate."""
    if window_s <= 0 or horizon_s < 0 or bins < 2:
        raise ValueError(f"window_s={window_s} must be positive, horizon_s={horizon_s} >= 0 and bins={bins} >= 2")
    t = np.asarray(arrivals, dtype=np.float64)
    t = t[(t > now - window_s) & (t <= now)]
    if len(t):  # a window longer than the arrivals seen so far would read as a rise
        window_s = min(window_s, max(now - float(t.min()), window_s / bins))
    edges = np.linspace(now - window_s, now, bins + 1)
    width = window_s / bins
    counts = np.histogram(t, bins=edges)[0] / width
    if len(t) < 2 * bins:
        return len(t) / window_s
    mids = (edges[:-1] + edges[1:]) / 2 - now
    slope, level = np.polyfit(mids, counts, 1)
    return max(float(level + slope * horizon_s / 2), 0.0)


def holding_time_s(
    rate_now: float, rate_ahead: float, horizon_s: float, carried_rps: float, limit_s: float | None = None
) -> float:
    """Seconds until a rate moving linearly from ``rate_now`` (the mean of the next
    ``horizon_s`` being ``rate_ahead``) outgrows ``carried_rps``: ``limit_s`` (default
    ``horizon_s``) where it does not sooner, 0 where it already has."""
    limit = horizon_s if limit_s is None else limit_s
    if rate_now > carried_rps:
        return 0.0
    slope = 2 * (rate_ahead - rate_now) / horizon_s if horizon_s > 0 else 0.0
    if slope <= 0:
        return limit
    return min(limit, (carried_rps - rate_now) / slope)


def fastest_alone_s(pb: CapacityProblem, tp: int, threshold: float | None = None) -> np.ndarray:
    """Per class, the seconds of a request alone on a TP-``tp`` instance with every step at
    ``threshold`` (stage 1's step prices at batch 1). None: the lowest candidate; a
    threshold between candidates takes the next one up (fewer tokens per step)."""
    if threshold is None:
        per_step = max(pb.tokens_per_step)
    else:
        above = [t for t, _ in sorted(zip(pb.thresholds, pb.tokens_per_step)) if t >= threshold - 1e-9]
        per_step = dict(zip(pb.thresholds, pb.tokens_per_step))[above[0]] if above else min(pb.tokens_per_step)
    steps = np.array([k.output_tokens for k in pb.classes]) / per_step
    rec = np.minimum(pb.recompute_steps(), steps)
    lc, lr = pb.step_costs(tp, 1)
    return rec * lr + (steps - rec) * lc


def out_of_reach(pb: CapacityProblem, degrees: Sequence[int], threshold: float | None = None) -> list[int]:
    """Indices of the classes whose SLO no instance of ``degrees`` meets, even alone at
    ``threshold`` (None: the lowest candidate; the controller's lowest allowed one, its
    quality budget's, where it has one)."""
    if not degrees:
        return list(range(len(pb.classes)))
    best = np.min([fastest_alone_s(pb, d, threshold) for d in degrees], axis=0)
    slo = np.array([k.slo_s for k in pb.classes])
    return [int(k) for k in np.flatnonzero(best > slo)]


def alone_s(
    profile: LatencyProfile,
    tp: int,
    prompt_tokens: int,
    output_tokens: int,
    tokens_per_step: float,
    block_length: int,
    block_causal: bool = False,
) -> float:
    """Seconds of one request alone on a TP-``tp`` instance at ``tokens_per_step`` (one
    threshold's), its steps split as its family prices them."""
    split = step_split(output_tokens / tokens_per_step, prompt_tokens, output_tokens, block_length, block_causal)
    return split.seconds(profile.curve(tp, StepKind.CACHE), profile.curve(tp, StepKind.RECOMPUTE))


def alone_s_many(
    profile: LatencyProfile,
    tp: int,
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    tokens_per_step: float,
    block_length: int,
    block_causal: bool = False,
) -> np.ndarray:
    """:func:`alone_s` of many requests at once, to the same floats: the same split
    (:func:`~dilaserve.control.step_law.step_split`) and the same curves, as arrays. The
    reach check judges every request of the monitor's window after each tuning, so it must
    not cost a Python call per request on the step loop."""
    p = np.asarray(prompt_tokens, dtype=np.float64)
    o = np.asarray(output_tokens, dtype=np.float64)
    b = float(int(block_length))
    blocks = o / b
    if block_causal:
        recompute, rec_tokens, appends = np.ones_like(o), p + b, np.maximum(blocks - 1.0, 0.0)
    else:
        recompute, rec_tokens, appends = blocks, p + o, np.zeros_like(o)
    cache_steps = np.maximum(o / tokens_per_step - recompute, 0.0)
    cached = cache_steps > 0
    fed = b + np.where(cached, appends * b / np.where(cached, cache_steps, 1.0), 0.0)
    t = np.zeros_like(o)
    t += np.where(cached, cache_steps * profile.curve(tp, StepKind.CACHE).many(fed), 0.0)
    t += np.where(recompute > 0, recompute * profile.curve(tp, StepKind.RECOMPUTE).many(rec_tokens), 0.0)
    return t


def tiers_out_of_reach(
    requests,
    profile: LatencyProfile,
    home: Sequence[int],
    degrees: Sequence[int],
    tokens_per_step: float,
    block_length: int,
    block_causal: bool = False,
) -> list[int]:
    """Priorities of the SLO tiers (``requests``: ``(prompt, output, SLO, priority)``) most
    of whose requests no instance of ``home``'s degrees meets alone at ``tokens_per_step``,
    while one of ``degrees`` meets most of them. Judged request by request: a length class's
    tightest SLO belongs to its shortest request, so a class can look out of reach when its
    requests are not."""
    if not len(requests):
        return []
    p, o, slo, prio = (np.asarray(col) for col in zip(*requests))
    fastest = {d: alone_s_many(profile, d, p, o, tokens_per_step, block_length, block_causal) for d in degrees}
    at_home = [fastest[d] for d in home if d in fastest]
    beyond_home = (np.min(at_home, axis=0) if at_home else np.full(len(slo), np.inf)) > slo
    reached = np.min(list(fastest.values()), axis=0) <= slo
    out = []
    for tier in sorted(set(prio.tolist())):
        mine = prio == tier
        if 2 * int(beyond_home[mine].sum()) > int(mine.sum()) and 2 * int(reached[mine].sum()) > int(mine.sum()):
            out.append(int(tier))
    return out


def reach_node_counts(
    pb: CapacityProblem,
    gpus_per_node: int,
    home_degree: int,
    fast_degree: int,
    need_rps: float,
    threshold: float | None = None,
    most_nodes: int | None = None,
) -> list[dict[int, int]] | None:
    """Per node, instances per TP degree of the layout with the most nodes of
    ``fast_degree`` (at most ``most_nodes``; the rest ``home_degree``) that still carries
    ``need_rps`` of ``pb``'s class mix at ``threshold`` (:func:`capacity_rps`; None: the
    lowest candidate); None where not even one such node leaves enough. Stage 1 prices a
    tier by its tightest SLO and the batch a degree may run; a layout only a fast degree
    serves the tight tier on needs as many of its instances as the load allows, so that
    they run small batches."""
    if gpus_per_node % fast_degree or gpus_per_node % home_degree:
        return None
    fast, home = {fast_degree: gpus_per_node // fast_degree}, {home_degree: gpus_per_node // home_degree}
    for k in range(min(pb.nodes, most_nodes or pb.nodes), 0, -1):
        counts = {fast_degree: k * fast[fast_degree], home_degree: 0}
        counts[home_degree] += (pb.nodes - k) * home[home_degree]
        if capacity_rps(pb, counts, threshold) >= need_rps:
            return [dict(fast)] * k + [dict(home)] * (pb.nodes - k)
    return None
