"""Named scheduling policies: the system, its baselines and its ablations.

A policy only names its parts (dispatch, migration, migration point, filters) and switches
mechanisms on or off, so each ablation differs from ``dilaserve`` in exactly one field.
``fixed@TAU`` (one per candidate threshold) is the INFaaS-like baseline at threshold TAU:
together they trace the static speed-quality frontier an adaptive policy must beat
(docs/architecture.md, evaluation method).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from dilaserve.control.config import ControlConfig
from dilaserve.schedule.registry import Registry


def fixed_policy_name(threshold: float) -> str:
    """``fixed@0.7``: the INFaaS-like policy at a fixed ``threshold`` (printed as Python prints it)."""
    return f"fixed@{float(threshold)}"


@dataclass(frozen=True)
class SchedulerPolicy:
    """Attributes:
        name: registry name.
        dispatch: dispatch policy name (``lowest_latency``, ``least_tokens``).
        migration: migration policy name (``lowest_latency``, ``load_balance``, ``none``).
        migration_point: when a request may move (``recompute``: before recompute steps,
            i.e. any step without caching; ``any``: between any two steps).
        filters: instance filter names; an instance must pass all of them.
        slo_aware: per-request SLO-aware thresholds; False runs every request at
            ``ControlConfig.fixed_threshold``.
        load_control: cap thresholds so the worst-case load fits the cluster.
        reconfig: act on reconfiguration ticks (two-stage ILP); False keeps the cluster static.
        predictor: the kind of step predictor required (``learned``: any, ``oneshot``,
            ``oracle``); None when thresholds are fixed.
        refresh_every_steps: overrides ``ControlConfig.refresh_every_steps`` (the oracle
            refreshes every step, since true values need no scaling).
        fixed_threshold: overrides ``ControlConfig.fixed_threshold``, the threshold of a
            policy without SLO-aware thresholds (None: use the config's); must be one of
            ``ControlConfig.thresholds``.
    """

    name: str
    dispatch: str = "lowest_latency"
    migration: str = "lowest_latency"
    migration_point: str = "recompute"
    filters: tuple[str, ...] = ("batch_room",)
    slo_aware: bool = True
    load_control: bool = True
    reconfig: bool = True
    predictor: Optional[str] = "learned"
    refresh_every_steps: Optional[int] = None
    fixed_threshold: Optional[float] = None

    def control_for(self, control: ControlConfig) -> ControlConfig:
        """``control`` with this policy's overrides applied."""
        if self.fixed_threshold is None:
            return control
        if float(self.fixed_threshold) not in control.thresholds:
            raise ValueError(
                f"policy {self.name!r} runs at threshold {self.fixed_threshold}, which is not a candidate "
                f"threshold {control.thresholds}: add it to ControlConfig.thresholds or use one of the "
                f"registered fixed@ policies ({', '.join(fixed_policy_name(t) for t in control.thresholds)})"
            )
        return replace(control, fixed_threshold=float(self.fixed_threshold))


policies: Registry[SchedulerPolicy] = Registry("scheduler policy")

_FIXED = dict(slo_aware=False, load_control=False, reconfig=False, predictor=None)
DILASERVE = policies.add("dilaserve", SchedulerPolicy("dilaserve"))
policies.add("infaas", SchedulerPolicy("infaas", dispatch="least_tokens", migration="none", **_FIXED))
policies.add("llumnix", SchedulerPolicy("llumnix", dispatch="least_tokens", migration="load_balance", **_FIXED))
policies.add("dilaserve-no-load-control", replace(DILASERVE, name="dilaserve-no-load-control", load_control=False))
policies.add("dilaserve-no-reconfig", replace(DILASERVE, name="dilaserve-no-reconfig", reconfig=False))
policies.add("dilaserve-oneshot", replace(DILASERVE, name="dilaserve-oneshot", predictor="oneshot"))
policies.add("dilaserve-migrate-any-step", replace(DILASERVE, name="dilaserve-migrate-any-step", migration_point="any"))
policies.add("oracle", replace(DILASERVE, name="oracle", predictor="oracle", refresh_every_steps=1))


# The static frontier: INFaaS-like dispatch at each candidate threshold (fixed@0.5 ... fixed@0.9).
def _fixed_at(threshold: float) -> SchedulerPolicy:
    name = fixed_policy_name(threshold)
    return policies.add(name, replace(policies.get("infaas"), name=name, fixed_threshold=threshold))


FIXED_POLICIES: tuple[str, ...] = tuple(_fixed_at(t).name for t in ControlConfig().thresholds)


def get_policy(policy: "SchedulerPolicy | str") -> SchedulerPolicy:
    return policies.get(policy) if isinstance(policy, str) else policy
