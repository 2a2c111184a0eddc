"""What the server builds its control plane from: the Ray connection, the cluster it may plan
for, the control plane's spec (with the tuner's replay of the server's own cluster), and an
operator's live reconfiguration.

The runtime (:mod:`dilaserve.serve.runtime`) calls these at start-up; the admin API and
``bench chaos`` call :func:`reconfigure_to` on the engine core's loop.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from dilaserve.cluster import ray_local
from dilaserve.reconfig.config import ClusterConfig, ReconfigConfig
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.schedule.control_plane import ControlPlaneSpec
from dilaserve.schedule.control_worker import replay_worker
from dilaserve.schedule.policies import get_policy

from .config import ServeConfig
from .control_inputs import ControlInputs

if TYPE_CHECKING:
    from .runtime import ServingRuntime


def connect_ray(cfg: ServeConfig) -> bool:
    """Join ``--ray-address`` or start a local cluster; True if this call started Ray.

    Call it before the HTTP server installs its signal handlers (see
    :func:`dilaserve.cluster.ray_local.connect`).
    """
    # CPU slots stand in for GPUs: one Ray CPU per TP rank.
    return ray_local.connect(cfg.ray_address, cfg.num_slots if cfg.device == "cpu" else None)


def cluster_config(cfg: ServeConfig) -> ClusterConfig:
    """The cluster the server may plan for: its slots as nodes, its TP degrees and batch limits."""
    return ClusterConfig(
        nodes=cfg.nodes,
        gpus_per_node=cfg.gpus_per_node,
        tp_degrees=tuple(cfg.tp_degrees),
        max_batch_tokens={d: cfg.max_batch_tokens * d for d in cfg.tp_degrees},
    )


def control_plane_spec(cfg: ServeConfig, inputs: ControlInputs) -> ControlPlaneSpec:
    """The server's per-concern configs, completed with what the artifacts measured (the
    step law) and the served model's block length."""
    rc = None
    if cfg.reconfig is not None:
        rc = replace(cfg.reconfig, block_length=cfg.block_length)
        rc = rc.with_step_law(inputs.step_law) if inputs.step_law else rc
    control = replace(cfg.control, step_law=inputs.step_law)
    make_replay = _tuner_replay(cfg, inputs, control, rc)
    evaluator = make_replay() if make_replay else None
    return ControlPlaneSpec(
        inputs.profile,
        control,
        cluster_config(cfg),
        reconfig=rc,
        monitor=cfg.monitor,
        accuracy=inputs.accuracy,
        scheduler=cfg.scheduler,
        tuner=cfg.tuner,
        evaluator=evaluator,
        control_worker=replay_worker(make_replay, cfg.control_cpu_share, cfg.control_burst_s, cfg.control_niceness)
        if make_replay
        else None,
    )


def _tuner_replay(cfg: ServeConfig, inputs: ControlInputs, control, reconfig):
    """What builds the operating-point tuner's replay of the server's own cluster on its
    artifacts' step law (the simulator runs this same control plane; a picklable partial,
    so the control worker's process builds its own), or None where the policy does not
    tune or the artifacts to replay are missing."""
    policy = get_policy(cfg.policy)
    if not policy.tune or inputs.replay is None:
        return None
    from dilaserve.sim.setting import ClusterSetting, Predictors  # the simulator, only for a tuning server
    from dilaserve.sim.window_replay import serving_replay

    table, quality = inputs.replay
    block_causal = bool(inputs.step_law and inputs.step_law.block_causal)
    setting = ClusterSetting(
        "serving",
        inputs.profile,
        cluster_config(cfg),
        control=control,
        reconfig=reconfig or ReconfigConfig(),
        block_length=cfg.block_length,
        block_causal=block_causal,
    )
    predictors = Predictors(inputs.predictor, inputs.oneshot, quality)
    return partial(serving_replay, setting, table, quality, predictors, cfg.tuner, policy)


def reconfigure_to(runtime: ServingRuntime, node_counts: list[dict[int, int]]) -> bool:
    """Apply an operator-chosen configuration live (stage 2 only: least disruptive placement).

    ``node_counts`` gives, per node, instances per TP degree, e.g. ``[{2: 1}]`` for one
    TP-2 instance on a 2-slot node. Requests in flight migrate off drained instances;
    none is dropped. Returns False while a previous plan is still executing. Run it on the
    engine core's loop (``runtime.core.call(reconfigure_to, runtime, counts)``).
    """
    cfg = runtime.cfg
    sched = runtime.scheduler
    missing = sorted({d for nc in node_counts for d in nc if not sched.profile.has(d)})
    if missing:
        raise ValueError(
            f"the latency profile has no TP {missing}: instances of those degrees would get no "
            f"requests; measure them first (`make artifacts`) or choose from TP {list(sched.profile.tp_degrees)}"
        )
    reconf = sched.reconfigurator or Reconfigurator(cluster_config(cfg), sched.profile)
    plan = reconf.plan_to(node_counts, sched.pool.active_specs())
    return sched.apply_plan(plan)  # the runtime counts it, as the scheduler's observer
