"""Capacity model vs simulator: ``python -m dilaserve.bench capacity [--json] [--quick]``.

For each request shape, compares the predicted saturation throughput of the paper's static
all-TP-1 cluster at threshold 0.9 (:func:`~dilaserve.sim.capacity.nominal_capacity_rps`,
the control plane's capacity model with the replayed step law) with what the simulator
measures: the real :class:`~dilaserve.sim.simulator.Simulator` runs the ``infaas`` policy
(fixed 0.9, static cluster) under Poisson arrivals well above the predicted capacity, and
requests completed per second are counted in a window that starts after warm-up and ends
when the backlog is served (the drain, once the queue is empty and batches shrink, is left
out). ``ratio`` = measured / predicted; ``max_abs_error`` is the largest ``|ratio - 1|``
(target: at most 0.15).

The simulator's clock is simulated, so the machine's load cannot move these numbers; what
does is the sample of arrivals and lengths. Each shape is therefore measured ``repeats`` times
with consecutive seeds, shapes in turn (as the wall-clock benches interleave theirs), and
reports the median ratio and ``ratio_spread`` (max - min over the seeds); ``predicted_rps``
and ``measured_rps`` are medians too.

Shapes: ``trace`` (the shipped Azure trace's token counts, resampled), ``sharegpt``,
``gsm8k`` and ``long-prompt`` (the length models of :mod:`dilaserve.sim.lengths`).
"""

from __future__ import annotations

import argparse
import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from dilaserve.bench.common import emit, machine_info, ratio
from dilaserve.eval.context import EvalContext, EvalOptions
from dilaserve.reconfig.plan import static_layout
from dilaserve.sim.arrivals import gamma_arrivals
from dilaserve.sim.capacity import nominal_capacity_rps
from dilaserve.sim.lengths import sample_lengths
from dilaserve.sim.progress import canvas_length
from dilaserve.sim.setting import ClusterSetting
from dilaserve.sim.traces import AZURE_CONV, load_trace
from dilaserve.sim.workload import build_workload

TARGET_MAX_ABS_ERROR = 0.15
THRESHOLD = 0.9
POLICY = "infaas"

Lengths = Callable[[int, np.random.Generator], tuple[np.ndarray, np.ndarray]]


def _trace_lengths(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    tr = load_trace(AZURE_CONV)
    i = rng.integers(len(tr), size=n)
    return tr.prompt_tokens[i], tr.output_tokens[i]


def _model_lengths(kind: str) -> Lengths:
    return lambda n, rng: sample_lengths(kind, n, rng)


SHAPES: dict[str, Lengths] = {
    "trace": _trace_lengths,
    "sharegpt": _model_lengths("sharegpt"),
    "gsm8k": _model_lengths("gsm8k"),
    "long-prompt": _model_lengths("long-prompt"),
}


@dataclass(frozen=True)
class BenchSettings:
    """Attributes:
    duration_s: simulated seconds of arrivals per shape.
    warmup_share: the first share of ``duration_s`` is left out of the measurement (the
        instances fill up and the queue forms).
    overload: arrival rate as a multiple of the predicted capacity (saturating).
    nodes: nodes of 4 GPUs in the cluster (the paper's: 4).
    seed: seeds arrivals and lengths (repetition i uses ``seed + i``).
    repeats: measurements per shape, each with its own seed; the ratio is their median.
    """

    duration_s: float = 60.0
    warmup_share: float = 0.4
    overload: float = 1.5
    nodes: int = 4
    seed: int = 0
    repeats: int = 3

    def __post_init__(self) -> None:
        if self.duration_s <= 0 or not 0 <= self.warmup_share < 1 or self.overload <= 1:
            raise ValueError(
                f"{self}: give a positive duration, a warm-up share in [0, 1) and an overload > 1 "
                "(the bench measures a saturated cluster)"
            )
        if self.repeats < 1:
            raise ValueError(f"repeats {self.repeats}: measure each shape at least once")


QUICK = BenchSettings(duration_s=40.0, nodes=1, repeats=1)


def measure(ctx: EvalContext, setting: ClusterSetting, lengths: Lengths, cfg: BenchSettings, name: str) -> dict:
    """Predicted and measured saturation throughput (requests/s) of one shape.

    A saturated queue lets small requests overtake large ones that wait for batch room, so
    completions while arrivals last are biased towards small requests. The window therefore
    runs from the warm-up until the backlog is served (all but the last batchful of
    requests finished): inside it the cluster is saturated and it serves the arrival mix,
    the mix the prediction is for.
    """
    rng = np.random.default_rng(cfg.seed)
    sample_p, sample_o = lengths(20000, rng)
    predicted = nominal_capacity_rps(setting, ctx.table, sample_p, sample_o, THRESHOLD)
    arrivals = gamma_arrivals(cfg.overload * predicted, cfg.duration_s, rng)
    prompt, output = lengths(len(arrivals), rng)
    wl = build_workload(f"capacity-{name}", arrivals, prompt, output)
    # No request may become late on arrival or be judged against an SLO: only throughput counts.
    res = ctx.simulator(setting).run(POLICY, wl, slo_s=1e6)
    fin = np.sort(res.requests["finish_s"].drop_nulls().to_numpy())
    tokens = prompt + np.array([canvas_length(o, setting.block_length) for o in output])
    in_flight = sum(
        s.max_batch_tokens // int(tokens.mean()) for s in static_layout(setting.cluster, setting.initial_tp)
    )
    start, end = cfg.warmup_share * cfg.duration_s, float(fin[max(len(fin) - in_flight - 1, 0)])
    measured = float(((fin >= start) & (fin <= end)).sum() / (end - start)) if end > start else 0.0
    return {
        "predicted_rps": round(predicted, 3),
        "measured_rps": round(measured, 3),
        "ratio": ratio(measured, predicted),
        "requests": len(wl),
        "window_s": [round(start, 1), round(end, 1)],
    }


def _median_of(runs: list[dict]) -> dict:
    """One shape's repetitions as one entry: median rates and ratio, the ratio's spread."""
    ratios = [r["ratio"] for r in runs if r["ratio"] is not None]
    return {
        "predicted_rps": round(statistics.median(r["predicted_rps"] for r in runs), 3),
        "measured_rps": round(statistics.median(r["measured_rps"] for r in runs), 3),
        "ratio": round(statistics.median(ratios), 3) if ratios else None,
        "ratio_spread": round(max(ratios) - min(ratios), 3) if ratios else None,
        "repetitions": len(runs),
        "requests": runs[0]["requests"],
        "window_s": runs[0]["window_s"],
    }


def run(cfg: BenchSettings, shapes=tuple(SHAPES)) -> dict:
    ctx = EvalContext(EvalOptions(settings=("paper",), latency_noise=0.0, seed=cfg.seed))
    base = ctx.setting("paper")
    setting = replace(base, cluster=replace(base.cluster, nodes=cfg.nodes))
    runs: dict[str, list[dict]] = {name: [] for name in shapes}
    for i in range(cfg.repeats):
        for name in shapes:
            runs[name].append(measure(ctx, setting, SHAPES[name], replace(cfg, seed=cfg.seed + i), name))
    workloads = {name: _median_of(rs) for name, rs in runs.items()}
    errors = [abs(w["ratio"] - 1) for w in workloads.values() if w["ratio"] is not None]
    return {
        "workloads": workloads,
        "max_abs_error": round(max(errors), 3) if errors else None,
        "target_max_abs_error": TARGET_MAX_ABS_ERROR,
        "settings": {
            "setting": setting.name,
            "profile": setting.profile.name,
            "gpus": setting.cluster.total_gpus,
            "tp": setting.initial_tp,
            "threshold": THRESHOLD,
            "policy": POLICY,
            "duration_s": cfg.duration_s,
            "warmup_share": cfg.warmup_share,
            "overload": cfg.overload,
            "seed": cfg.seed,
            "repeats": cfg.repeats,
        },
        "machine": machine_info(),
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m dilaserve.bench capacity")
    ap.add_argument("--json", action="store_true", help="print only the JSON result line")
    ap.add_argument("--quick", action="store_true", help="one node and 40 simulated seconds per shape (tests)")
    ap.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=list(SHAPES), help="request shapes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=None, help="seeds per shape (default: 3, or 1 with --quick)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    if args.repeats is not None and args.repeats < 1:
        ap.error("--repeats must be at least 1")
    cfg = replace(QUICK if args.quick else BenchSettings(), seed=args.seed)
    cfg = replace(cfg, repeats=args.repeats) if args.repeats is not None else cfg
    emit(run(cfg, tuple(args.shapes)), args.json)
    return 0
