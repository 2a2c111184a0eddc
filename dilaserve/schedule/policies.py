"""Named scheduling policies: the system, its baselines and its ablations.

A policy only names its parts: dispatch, migration, migration point and filters (the
scheduler's), and threshold selection, load control and admission (the threshold
controller's, :mod:`dilaserve.control.policies`). Two families:

* ``dilaserve-paper`` runs the paper's algorithms exactly; its ablations
  (``dilaserve-paper-no-...``) switch one mechanism off, and ``dilaserve-paper+...`` add one
  quality-aware piece each, so every piece's effect is measured against the paper's.
* ``dilaserve`` (the default) combines the quality-aware pieces: thresholds limited by the
  operator's quality budget, drops only where they make an SLO, no cap on requests that
  miss anyway, a price on capacity once the load needs it, and SLO-aware admission.
``fixed@TAU`` (one per candidate threshold) is the INFaaS-like baseline at threshold TAU:
together they trace the static speed-quality frontier an adaptive policy must beat
(docs/architecture.md, evaluation method).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dilaserve.control.config import ControlConfig
from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS
from dilaserve.utils.registry import Registry


def fixed_policy_name(threshold: float) -> str:
    """``fixed@0.7``: the INFaaS-like policy at a fixed ``threshold`` (printed as Python prints it)."""
    return f"fixed@{float(threshold)}"


@dataclass(frozen=True)
class SchedulerPolicy:
    """Attributes:
    name: registry name.
    dispatch: dispatch policy name (``lowest_latency``, ``least_tokens``, or ``slack_fit``:
        the lowest latency, or best fit by slack where the operating point asks for it).
    migration: migration policy name (``lowest_latency``, ``load_balance``, ``none``).
    migration_point: when a request may move (``recompute``: before recompute steps,
        i.e. any step without caching; ``any``: between any two steps).
    filters: instance filter names; an instance must pass all of them.
    selection: threshold selection (``fixed``: every request at the fixed threshold;
        ``paper``: the highest threshold predicted to make the SLO, else the lowest;
        ``keep_quality``: the same, else the highest allowed).
    load_control: how thresholds are capped so in-flight work fits the cluster
        (``none``, ``paper``, ``feasible_prefix``, ``capacity_price`` or
        ``per_work_price``: these two also price capacity for the requests arriving
        next); ignored by fixed selection.
    admission: ``all``, or ``slo`` (refuse arrivals predicted to miss their SLO even at
        their lowest allowed threshold: HTTP 429 in serving, a miss in evaluation).
    quality_budget: limit the candidate thresholds by ``ControlConfig.quality_budget``
        and the model's measured threshold-quality table.
    step_pricing: how remaining steps are priced (``paper``, or ``mixed_batch``: a step
        also pays the other pass its batch-mates trigger).
    calibrate: correct step predictions online by what finished requests really took.
    ration: under overload, admission takes the arrivals with the most expected hits per
        unit of work (``ControlConfig.ration_window_s``); needs load control and admission.
    deadline_batching: an instance's step leaves out the members with slack to spare while
        that lets a member that would miss in the whole batch make its SLO
        (:meth:`ThresholdController.step_members`); False steps every member every time.
    reconfig: act on reconfiguration ticks (two-stage ILP); False keeps the cluster static.
    predictor: the kind of step predictor required (``learned``: any, ``oneshot``,
        ``oracle``); None when thresholds are fixed.
    refresh_every_steps: overrides ``ControlConfig.refresh_every_steps`` (the oracle
        refreshes every step, since true values need no scaling).
    fixed_threshold: overrides ``ControlConfig.fixed_threshold``, the threshold of a
        policy without SLO-aware thresholds (None: use the config's); must be one of
        ``ControlConfig.thresholds``.
    tune: move the operating point online by replaying recent arrivals against every
        static point and the adaptive one (the operating-point tuner); needs a replay from
        the layer that builds the control plane, and runs without it otherwise.
    learn_step_time: learn each instance's step time against the profile from the steps
        it finishes, and price admission, thresholds and capacity on the corrected
        profile (:mod:`dilaserve.control.step_time`; not ``calibrate``, which corrects
        the predicted step counts).
    """

    name: str
    dispatch: str = "lowest_latency"
    migration: str = "lowest_latency"
    migration_point: str = "recompute"
    filters: tuple[str, ...] = ("batch_room",)
    selection: str = "keep_quality"
    load_control: str = "capacity_price"
    admission: str = "slo"
    quality_budget: bool = True
    step_pricing: str = "mixed_batch"
    calibrate: bool = True
    ration: bool = True
    deadline_batching: bool = False
    reconfig: bool = True
    predictor: str | None = "learned"
    refresh_every_steps: int | None = None
    fixed_threshold: float | None = None
    tune: bool = False
    learn_step_time: bool = True

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

_FIXED = dict(
    selection="fixed", load_control="none", admission="all", quality_budget=False, reconfig=False, predictor=None
)
DILASERVE = policies.add(
    "dilaserve", SchedulerPolicy("dilaserve", dispatch="slack_fit", deadline_batching=True, tune=True)
)
PAPER = policies.add(
    "dilaserve-paper",
    SchedulerPolicy(
        "dilaserve-paper",
        selection="paper",
        load_control="paper",
        admission="all",
        quality_budget=False,
        step_pricing="paper",
        calibrate=False,
        ration=False,
    ),
)
policies.add("infaas", SchedulerPolicy("infaas", dispatch="least_tokens", migration="none", **_FIXED))
policies.add("llumnix", SchedulerPolicy("llumnix", dispatch="least_tokens", migration="load_balance", **_FIXED))


#: Every variant by the policy it varies, in registration order (the ablation experiment's rows).
VARIANTS: dict[str, list[str]] = {}


def _variant(base: SchedulerPolicy, suffix: str, **change) -> SchedulerPolicy:
    name = f"{base.name}{suffix}"
    VARIANTS.setdefault(base.name, []).append(name)
    return policies.add(name, replace(base, name=name, **change))


# The paper's mechanisms, one switched off at a time.
_variant(PAPER, "-no-load-control", load_control="none")
_variant(PAPER, "-no-reconfig", reconfig=False)
_variant(PAPER, "-oneshot", predictor="oneshot")
_variant(PAPER, "-migrate-any-step", migration_point="any")
# The quality-aware pieces, one added to the paper's algorithms at a time.
_variant(PAPER, "+keep-quality", selection="keep_quality")
_variant(PAPER, "+feasible-prefix", load_control="feasible_prefix")
_variant(PAPER, "+capacity-price", load_control="capacity_price")
_variant(PAPER, "+quality-budget", quality_budget=True)
_variant(PAPER, "+admission", admission="slo")
_variant(PAPER, "+mixed-batch-pricing", step_pricing="mixed_batch")
_variant(PAPER, "+calibration", calibrate=True)
# And taken out of the default one at a time.
_variant(DILASERVE, "-no-admission", admission="all")
_variant(DILASERVE, "-no-capacity-price", load_control="feasible_prefix")
_variant(DILASERVE, "-per-work-price", load_control="per_work_price")
_variant(DILASERVE, "-no-quality-budget", quality_budget=False)
_variant(DILASERVE, "-no-reconfig", reconfig=False)
_variant(DILASERVE, "-no-calibration", calibrate=False)
_variant(DILASERVE, "-no-tuner", tune=False)
_variant(DILASERVE, "-no-slack-fit", dispatch="lowest_latency")
_variant(DILASERVE, "-no-rationing", ration=False)
_variant(DILASERVE, "-no-deadline-batching", deadline_batching=False)
# Not an ablation row: on a machine that steps as profiled (every simulated run) it changes nothing.
policies.add("dilaserve-no-step-time", replace(DILASERVE, name="dilaserve-no-step-time", learn_step_time=False))
policies.add("oracle", replace(DILASERVE, name="oracle", predictor="oracle", refresh_every_steps=1, tune=False))


# The static frontier: INFaaS-like dispatch at each candidate threshold (fixed@0.5 ... fixed@0.9).
def _fixed_at(threshold: float) -> SchedulerPolicy:
    name = fixed_policy_name(threshold)
    return policies.add(name, replace(policies.get("infaas"), name=name, fixed_threshold=threshold))


FIXED_POLICIES: tuple[str, ...] = tuple(_fixed_at(t).name for t in CANDIDATE_THRESHOLDS)


# The static frontier with admission: the same fixed thresholds, refusing on arrival what is
# predicted to miss its SLO at that threshold (admission is generic: any static server can
# have it, so every adaptive mechanism is measured against these).
def _fixed_with_admission(threshold: float) -> SchedulerPolicy:
    base = policies.get(fixed_policy_name(threshold))
    name = f"{base.name}+admission"
    return policies.add(name, replace(base, name=name, admission="slo", predictor="learned"))


FIXED_ADMISSION_POLICIES: tuple[str, ...] = tuple(_fixed_with_admission(t).name for t in CANDIDATE_THRESHOLDS)


def get_policy(policy: SchedulerPolicy | str) -> SchedulerPolicy:
    return policies.get(policy) if isinstance(policy, str) else policy
