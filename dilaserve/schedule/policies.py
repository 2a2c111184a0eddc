"""Named scheduling policies: the system, its baselines and its ablations.

A policy only names its parts (dispatch, migration, migration point, filters) and switches
mechanisms on or off, so each ablation differs from ``dilaserve`` in exactly one field.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from dilaserve.schedule.registry import Registry


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


def get_policy(policy: "SchedulerPolicy | str") -> SchedulerPolicy:
    return policies.get(policy) if isinstance(policy, str) else policy
