"""Control-plane benchmark: scheduler cost per finished step, and ILP solve times.

``python -m dilaserve.bench control [--json] [--steps N] [--skip-ilp]``; the last line of
output is one JSON object with ``schedule_us_per_step``, ``ilp_s`` (wall seconds of stage 1 +
stage 2 per GPU count), ``ilp_cpu_s`` (their CPU seconds), ``ilp_optimal`` (every solve proved
optimality, none stopped at a time limit), ``ilp_status`` and ``machine``.

The scheduler runs against a minimal in-process harness (below): it plays instance steps
in time order, commits a few tokens per request per step and reports each finished step.
Only the scheduler's ``handle`` on step events is timed; the harness's own work is not.
"""

from __future__ import annotations

import argparse
import heapq
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from dilaserve.bench.common import machine_info
from dilaserve.cluster.base import (
    Backend,
    InstanceReady,
    InstanceSpec,
    StepAssignment,
    StepFinished,
)
from dilaserve.control.config import ControlConfig
from dilaserve.control.request import TrackedRequest
from dilaserve.control.step_law import TYPICAL_STEPS_PER_TOKEN
from dilaserve.engine.state import RequestState
from dilaserve.predict.base import OneShotPredictor
from dilaserve.profile.types import LatencyProfile, StepCurve
from dilaserve.reconfig.config import ClusterConfig, ReconfigConfig
from dilaserve.reconfig.monitor import RequestClass
from dilaserve.reconfig.plan import static_layout
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.reconfig.stage1 import solve_capacity
from dilaserve.reconfig.stage2 import solve_placement
from dilaserve.schedule.control_plane import ControlPlaneSpec, build_control_plane
from dilaserve.schedule.events import RequestArrived

MASK, EOS = 1, 2
#: Historical steps per token at each threshold (a representative rollout table).
STEPS_PER_TOKEN = TYPICAL_STEPS_PER_TOKEN


def synthetic_profile() -> LatencyProfile:
    """Linear step latency; TP-2 about 25% and TP-4 about 55% faster than TP-1 (made up, to time the control loop)."""
    speed = {1: 1.0, 2: 0.75, 4: 0.45}
    pts = (256, 4096, 16384, 65536, 131072)

    def curve(base: float, per_token: float, f: float) -> StepCurve:
        return StepCurve.from_points((n, f * (base + per_token * n)) for n in pts)

    return LatencyProfile(
        "synthetic",
        recompute={d: curve(0.02, 2.5e-5, f) for d, f in speed.items()},
        cache={d: curve(0.015, 2.5e-5, f) for d, f in speed.items()},
    )


# ------------------------------------------------------------------ scheduler bench
@dataclass
class _Harness(Backend):
    """Plays instance steps in time order for the benchmark."""

    profile: LatencyProfile
    specs: dict[str, InstanceSpec] = field(default_factory=dict)
    pending: list = field(default_factory=list)
    now: float = 0.0
    seq: int = 0

    def bind(self, sink) -> None:
        self.sink = sink

    def launch_instance(self, spec: InstanceSpec) -> None:
        self.specs[spec.instance_id] = spec
        self.sink(InstanceReady(self.now, spec.instance_id))

    def stop_instance(self, instance_id: str) -> None:
        raise NotImplementedError("the benchmark cluster is static")

    def migrate(self, state: RequestState, src: str, dst: str) -> None:
        state.drop_cache()

    def submit_step(self, instance_id: str, batch: Sequence[StepAssignment]) -> None:
        tp = self.specs[instance_id].tp
        tokens = sum(a.state.num_tokens for a in batch)
        self.seq += 1
        heapq.heappush(self.pending, (self.now + self.profile.latency(tp, tokens), self.seq, instance_id, list(batch)))

    def next_step(self) -> StepFinished:
        """Advance the earliest step: each request commits 1/steps-per-token tokens of its block."""
        t, _, iid, batch = heapq.heappop(self.pending)
        self.now = t
        for a in batch:
            st = a.state
            masked = np.flatnonzero(st.response[st.block_slice] == MASK) + st.block_start
            k = min(len(masked), max(1, round(1 / STEPS_PER_TOKEN.get(a.threshold, 0.5))))
            st.apply_step(masked[:k], np.full(k, 7), a.threshold, st.next_kind, np.full(5, a.threshold))
        return StepFinished(t, iid, tuple(a.state for a in batch))


def _request(i: int, now: float, rng: np.random.Generator) -> TrackedRequest:
    prompt = rng.integers(64, 1024)
    gen = int(rng.choice([64, 128, 256]))
    st = RequestState(f"r{i}", np.full(prompt, 5), gen_length=gen, block_length=32, mask_id=MASK, eos_id=EOS)
    slo = float(rng.uniform(20.0, 60.0))
    return TrackedRequest(st, arrival=now, deadline=now + slo, priority=int(rng.integers(0, 2)))


def bench_schedule(steps: int = 2000, in_flight: int = 1000, seed: int = 0) -> dict:
    profile = synthetic_profile()
    cluster = ClusterConfig(nodes=22, gpus_per_node=4, max_batch_tokens={1: 65536, 2: 131072, 4: 262144})
    # 64 instances of mixed TP: 48 TP-1, 12 TP-2, 4 TP-4.
    specs = (
        static_layout(ClusterConfig(nodes=12, gpus_per_node=4, max_batch_tokens=cluster.max_batch_tokens), 1, "a")
        + static_layout(ClusterConfig(nodes=6, gpus_per_node=4, max_batch_tokens=cluster.max_batch_tokens), 2, "b")
        + static_layout(ClusterConfig(nodes=4, gpus_per_node=4, max_batch_tokens=cluster.max_batch_tokens), 4, "c")
    )
    assert len(specs) == 64
    harness = _Harness(profile)
    sched = build_control_plane(
        harness,
        "dilaserve-no-reconfig",
        ControlPlaneSpec(profile, ControlConfig(), cluster),
        OneShotPredictor(STEPS_PER_TOKEN),
    )
    sched.start(specs)
    rng = np.random.default_rng(seed)
    n = 0
    for _ in range(in_flight):
        sched.handle(RequestArrived(harness.now, _request(n, harness.now, rng)))
        n += 1
    timings = []
    for _ in range(steps):
        ev = harness.next_step()
        t0 = time.perf_counter()
        sched.handle(ev)
        timings.append(time.perf_counter() - t0)
        while sched.in_flight < in_flight:  # keep the population steady (arrivals not timed)
            sched.handle(RequestArrived(harness.now, _request(n, harness.now, rng)))
            n += 1
    return {
        "schedule_us_per_step": round(1e6 * float(np.mean(timings)), 1),
        "schedule_us_p99": round(1e6 * float(np.quantile(timings, 0.99)), 1),
        "in_flight": sched.in_flight,
        "instances": len(sched.pool),
        "predictor": "oneshot",
        "migrations": sched.migrations,
    }


# ------------------------------------------------------------------------ ILP bench
def bench_classes(gpus: int) -> list[RequestClass]:
    """8 classes (2 prompt x 4 output buckets); ~20 req/s per 16 GPUs (the paper's peak)."""
    out = []
    for i, prompt in enumerate((256.0, 1024.0)):
        for j, output in enumerate((128.0, 256.0, 512.0, 1024.0)):
            alone = output * STEPS_PER_TOKEN[0.9] * synthetic_profile().latency(1, prompt + output)
            out.append(
                RequestClass(
                    (i, j), rate=gpus * 0.3 / (1 + j), prompt_tokens=prompt, output_tokens=output, slo_s=5 * alone
                )
            )
    return out


@dataclass(frozen=True)
class IlpTiming:
    """One reconfiguration's stage 1 + stage 2 at a cluster size."""

    seconds: float  # wall clock
    cpu_seconds: float  # this process's CPU time: what the solves cost on a loaded machine
    optimal: bool  # every solve proved optimality (none stopped at its time limit)
    statuses: tuple[str, ...]  # stage 1, stage 2


def bench_ilp(gpus: int, gpus_per_node: int = 4) -> IlpTiming:
    cluster = ClusterConfig(nodes=gpus // gpus_per_node, gpus_per_node=gpus_per_node)
    rec = Reconfigurator(cluster, synthetic_profile(), ReconfigConfig(time_limit_s=10.0, block_length=32))
    pb = rec.problem(bench_classes(gpus))
    existing = static_layout(cluster, 1)
    t0, c0 = time.perf_counter(), time.process_time()
    plan = solve_capacity(pb, rec.config.time_limit_s, rec.config.tiebreak_time_s)
    placement = None
    if plan is not None:
        placement = solve_placement(
            cluster.nodes, cluster.gpus_per_node, plan.node_counts, existing, rec.config.time_limit_s
        )
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    solves = [plan.solve if plan else None, placement.solve if placement else None]
    return IlpTiming(
        seconds,
        cpu,
        optimal=all(r is not None and r.optimal for r in solves),
        statuses=tuple(r.status if r else "none" for r in solves),
    )


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m dilaserve.bench control")
    ap.add_argument("--json", action="store_true", help="print only the JSON result line")
    ap.add_argument("--steps", type=int, default=2000, help="finished steps to time")
    ap.add_argument("--skip-ilp", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    result: dict = bench_schedule(args.steps)
    if not args.skip_ilp:
        runs = {str(g): bench_ilp(g) for g in (16, 64, 256)}
        result["ilp_s"] = {g: round(r.seconds, 3) for g, r in runs.items()}
        result["ilp_cpu_s"] = {g: round(r.cpu_seconds, 3) for g, r in runs.items()}
        result["ilp_optimal"] = {g: r.optimal for g, r in runs.items()}
        result["ilp_status"] = {g: "+".join(r.statuses) for g, r in runs.items()}
    result["machine"] = machine_info()
    if not args.json:
        for k, v in result.items():
            print(f"{k}: {v}")
    print(json.dumps(result))
    return 0
