"""``python -m dilaserve.bench quality [--json] [--quick]``: replay's quality estimate vs model mode.

Replay mode never decodes: it estimates each request's quality from the measured
threshold-quality table (:meth:`ThresholdQuality.estimate`). This benchmark checks that
estimate against the truth. The same prompt workload (same arrivals, same prompts) runs on
a small cluster of the embedded model's measured profile, once in model mode (the
embedded model decodes every request and the task grader grades it) and once in replay
mode, for each policy and load. Per (policy, load) it reports:

* ``model_quality``: the share of finished requests answered correctly in model mode,
  with its binomial standard error ``model_se_pp`` (percentage points);
* ``replay_quality``: the mean estimated quality of finished requests in replay mode;
* ``error_pp``: ``replay_quality - model_quality`` in percentage points: what a replay
  experiment gets wrong, dynamics and estimator together;
* ``own_estimate`` / ``own_error_pp``: the estimator applied to the model-mode requests'
  own per-step thresholds (and tokens), against their grades: the estimator alone, free
  of any difference between replayed and real step dynamics;
* ``varied_share``: the share of model-mode requests whose threshold changed mid-way.

``mixed`` pools every model-mode request whose threshold varied (the only ones the
varying-threshold estimate touches) and compares their grades with their estimates. A
policy chooses which requests vary (near capacity, the long, hard ones), so this pool is
harder than its thresholds alone say: read it as a diagnostic, the per-(policy, load)
rows as the criterion.
``max_abs_error_pp`` and ``max_abs_own_error_pp`` summarise the table. The prompts are
drawn with ``--prompt-seed``, held out from the pipeline's prompt set (seed 0), so the
comparison is out of sample. Loads are fractions of the cluster's nominal capacity at 0.9.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from dilaserve import artifacts
from dilaserve.bench.common import emit, machine_info
from dilaserve.engine import DenoisingEngine
from dilaserve.engine.state import RequestState
from dilaserve.predict.prompts import synthetic_prompts
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.schedule.policies import policies as registry
from dilaserve.sim.arrivals import prompt_workload
from dilaserve.sim.backend import SimBackendConfig
from dilaserve.sim.capacity import nominal_capacity_rps
from dilaserve.sim.progress import ModelProgress, ReplayProgress
from dilaserve.sim.setting import ClusterSetting, Predictors, with_dynamics
from dilaserve.sim.simulator import SimConfig, Simulator
from dilaserve.sim.slo import workload_slo
from dilaserve.sim.workload import WorkloadRequest
from dilaserve.utils.cli import add_dataclass_arguments, build_dataclass, flag_error, values_for

#: Policies compared by default; a name not registered in this checkout is skipped and listed.
DEFAULT_POLICIES = ("fixed@0.9", "fixed@0.7", "dilaserve", "dilaserve-paper")
#: Low load, near capacity, overloaded (fractions of nominal capacity at threshold 0.9).
DEFAULT_LOADS = (0.5, 1.0, 2.0)


@dataclass(frozen=True)
class QualityBenchConfig:
    """Attributes:
    requests: prompts per workload (each load serves the same prompts).
    loads: arrival rates as fractions of the cluster's nominal capacity at 0.9.
    policies: scheduler policies to compare.
    slo_scale: SLO = this x the mean isolated latency at 0.9; tight enough that an
        adaptive policy lowers thresholds near capacity.
    gpus: GPUs of the one-node cluster (TP 1 and 2 allowed, starting at TP 1).
    prompt_seed: seeds which task prompts are drawn; keep it away from the pipeline's
        prompt set (seed 0) for an out-of-sample check.
    seed: seeds arrivals, latency noise and replayed outcomes.
    """

    requests: int = 400
    loads: tuple[float, ...] = DEFAULT_LOADS
    policies: tuple[str, ...] = DEFAULT_POLICIES
    slo_scale: float = 3.0
    gpus: int = 2
    prompt_seed: int = 7
    seed: int = 0

    def __post_init__(self) -> None:
        if self.requests < 2:
            raise ValueError(f"requests={self.requests}: use at least 2 (e.g. 400, or --quick)")
        if not self.loads or any(not x > 0 for x in self.loads):
            raise ValueError(f"loads {self.loads}: give positive fractions of nominal capacity, e.g. 0.5 1 2")
        if not self.policies:
            raise ValueError("no policies to compare: name at least one, e.g. fixed@0.9 dilaserve")
        if not self.slo_scale > 0:
            raise ValueError(f"slo_scale={self.slo_scale} must be positive (e.g. 3)")
        if self.gpus < 1:
            raise ValueError(f"gpus={self.gpus}: the cluster needs at least one GPU")


QUICK = QualityBenchConfig(requests=48, loads=(1.0,), policies=("fixed@0.9", "dilaserve"))


def _pp(x: float) -> float:
    return round(100.0 * x, 2)


def _se_pp(p: float, n: int) -> float:
    return _pp(math.sqrt(p * (1.0 - p) / n)) if n else float("nan")


def run(cfg: QualityBenchConfig) -> dict:
    """Run every (load, policy) in both modes; the benchmark's JSON result."""
    torch.set_num_threads(1)  # small steps: extra threads only contend on a busy host
    t_start = time.perf_counter()
    known = set(registry.names())
    policies = [p for p in cfg.policies if p in known]
    skipped = [p for p in cfg.policies if p not in known]
    if not policies:
        raise ValueError(f"none of the policies {list(cfg.policies)} is registered: choose from {sorted(known)}")

    engine = DenoisingEngine.from_pretrained()
    dyn = artifacts.load_step_dynamics()
    table, quality = ReplayTable(dyn), artifacts.load_threshold_quality()
    profile = artifacts.load_profile("measured")
    tps = tuple(d for d in (1, 2) if d <= cfg.gpus)
    setting = with_dynamics(
        ClusterSetting("quality-bench", profile, ClusterConfig(nodes=1, gpus_per_node=cfg.gpus, tp_degrees=tps)), dyn
    )
    predictors = Predictors(artifacts.load_predictor(), artifacts.load_oneshot(), quality)
    sim_cfg = SimConfig(backend=SimBackendConfig(seed=cfg.seed))
    prompts = synthetic_prompts(cfg.requests, seed=cfg.prompt_seed)
    count = lambda text: len(engine.encode(text))  # noqa: E731
    prompt_tokens = np.array([count(p.text) for p in prompts])
    capacity = nominal_capacity_rps(setting, table, prompt_tokens, np.array([p.gen_length for p in prompts]), 0.9)

    rows, mixed_grades, mixed_estimates = [], [], []
    replay_model = ReplayProgress(table, quality, seed=cfg.seed)
    for load in cfg.loads:
        wl = prompt_workload(prompts, rate=load * capacity, count_tokens=count, seed=cfg.seed)
        slo = workload_slo(wl, profile, table, setting.block_length, 0.9, cfg.slo_scale)
        for name in policies:
            recorder = RecordingModelProgress(engine, table)
            model = Simulator(setting, recorder, predictors, sim_cfg).run(name, wl, slo)
            replay = Simulator(setting, ReplayProgress(table, quality, seed=cfg.seed), predictors, sim_cfg).run(
                name, wl, slo
            )
            grades = np.array([g for _, g in recorder.finished.values()])
            # The estimator on the model's own requests: exactly what replay mode would
            # have reported had its dynamics matched the model's step for step.
            own = np.array([replay_model.quality(wr, st) for wr, st in recorder.states()])
            varied = np.array([len(set(st.thresholds_used)) > 1 for _, st in recorder.states()])
            mixed_grades += grades[varied].tolist()
            mixed_estimates += own[varied].tolist()
            mq, rq = model.summary.quality, replay.summary.quality
            rows.append(
                {
                    "policy": name,
                    "load": load,
                    "rate": round(load * capacity, 2),
                    "model_quality": round(mq, 4),
                    "replay_quality": round(rq, 4),
                    "error_pp": _pp(rq - mq),
                    "model_se_pp": _se_pp(mq, len(grades)),
                    "own_estimate": round(float(own.mean()), 4),
                    "own_error_pp": _pp(float(own.mean()) - mq),
                    "varied_share": round(float(varied.mean()), 3),
                    "model_mean_threshold": round(model.summary.mean_threshold, 3),
                    "replay_mean_threshold": round(replay.summary.mean_threshold, 3),
                    "model_finished": len(grades),
                    "replay_finished": int(replay.requests["quality"].is_not_null().sum()),
                    "model_slo_attainment": round(model.summary.slo_attainment, 3),
                    "replay_slo_attainment": round(replay.summary.slo_attainment, 3),
                }
            )
            logging.getLogger(__name__).info("%s", rows[-1])

    mg, me = np.array(mixed_grades), np.array(mixed_estimates)
    mixed = {"requests": int(mg.size)}
    if mg.size:
        mixed.update(
            graded=round(float(mg.mean()), 4),
            estimate=round(float(me.mean()), 4),
            error_pp=_pp(float(me.mean() - mg.mean())),
            se_pp=_se_pp(float(mg.mean()), mg.size),
        )
    return {
        "max_abs_error_pp": max(abs(r["error_pp"]) for r in rows),
        "max_abs_own_error_pp": max(abs(r["own_error_pp"]) for r in rows),
        "rows": rows,
        "mixed": mixed,
        "estimator": quality.describe(),
        "config": {**asdict(cfg), "skipped_policies": skipped},
        "capacity_rps": round(capacity, 2),
        "wall_s": round(time.perf_counter() - t_start, 1),
        "machine": machine_info(),
    }


class RecordingModelProgress(ModelProgress):
    """Model mode that keeps every finished request's state and grade for the estimator check."""

    def __init__(self, engine, table):
        super().__init__(engine, table)
        self.finished: dict[str, tuple[tuple[WorkloadRequest, RequestState], float]] = {}

    def quality(self, req: WorkloadRequest, state: RequestState) -> float:
        grade = super().quality(req, state)
        self.finished[req.request_id] = ((req, state), grade)
        return grade

    def states(self) -> list[tuple[WorkloadRequest, RequestState]]:
        return [ws for ws, _ in self.finished.values()]


def parse(argv: list[str]) -> tuple[QualityBenchConfig, bool]:
    """The run's settings and whether to print only JSON."""
    ap = argparse.ArgumentParser(prog="python -m dilaserve.bench quality")
    ap.add_argument("--json", action="store_true", help="print only the JSON result line")
    ap.add_argument("--quick", action="store_true", help="48 requests, one load, two policies (for tests)")
    # The settings' flags, from QualityBenchConfig; those given override the full or the quick run.
    add_dataclass_arguments(ap, QualityBenchConfig, overrides_only=True)
    args = ap.parse_args(argv)
    base = QUICK if args.quick else QualityBenchConfig()
    try:
        return build_dataclass(QualityBenchConfig, {**asdict(base), **values_for(QualityBenchConfig, args)}), args.json
    except ValueError as exc:
        ap.error(flag_error(QualityBenchConfig, exc))
        raise  # unreachable: ap.error exits


def main(argv: list[str]) -> int:
    cfg, as_json = parse(argv)
    logging.basicConfig(level=logging.ERROR)
    emit(run(cfg), as_json)
    return 0
