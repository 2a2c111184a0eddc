"""Configuration of threshold selection and load control."""

from __future__ import annotations

from dataclasses import dataclass, field

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.control.step_law import StepLaw
from dilaserve.control.step_time import ESTIMATORS
from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS


@dataclass(frozen=True)
class ControlConfig:
    """How the controller picks each request's threshold.

    Attributes:
        thresholds: candidate confidence thresholds; any order, stored ascending.
        fixed_threshold: the threshold used by fixed-threshold policies (the baselines use
            0.9, the paper's default); must be one of ``thresholds``.
        refresh_every_steps: re-predict a request's remaining steps every ``k`` of its
            steps; in between, predictions are scaled by the share of masked tokens left.
            Larger ``k`` saves predictor time (a per-token refresh costs ~20% of a step).
        load_control_interval_s: re-run load control at most this often (seconds of
            event time) on step events; arrivals always trigger it. Load control walks
            every in-flight request, so running it on every step would dominate the loop.
        capacity_batch_grid: how many batch sizes to try when computing an instance's
            throughput with caching (its capacity is the best over batch sizes).
        quality_budget: the largest relative accuracy loss the operator accepts for speed:
            a candidate threshold is allowed only where the model's measured accuracy is at
            least ``(1 - quality_budget)`` times its best candidate's (0.1: within 10%).
            None allows every candidate. Policies that apply it need the threshold-quality
            table; without one, every candidate is allowed (and the log says so).
        admission_headroom: SLO-aware admission also refuses a request whose joining would
            push two or more requests in flight past ``(1 - admission_headroom)`` x their SLO
            time left, when they are within it now. The headroom absorbs prediction noise and
            the batch growing after a request is admitted (0.1: keep 10%; 0: protect only
            predicted hits).
        ration_window_s: under overload, admit the arrivals with the most expected hits per
            unit of work: when the work that arrived over the last ``ration_window_s``
            seconds exceeds what the cluster can do in that time, an arrival is refused
            unless its accuracy per token-step is among those that fill the cluster
            (:mod:`dilaserve.control.rationing`). Applies to SLO-aware policies with
            admission; None turns it off (every arrival the SLO check passes is taken).
        ration_utilisation: the share of the cluster's best throughput that rationing lets
            the admitted work fill.
        deadline_spare: deadline batching (policies with ``deadline_batching``) lets a
            member of an instance sit a step out, so that a member about to miss steps in a
            smaller batch, only while it finishes in the whole batch with this share of its
            SLO time left still free (0.5: it waits only with twice the time it needs).
        operating_point: the threshold each priority tier's new arrivals are pinned to
            (``OperatingPoint.static(0.8)``: every arrival admitted and run at 0.8), or
            adaptive (the default: each request's threshold chosen per step from its allowed
            set). The static frontier runs pinned points; the operating-point tuner moves
            the point online.
        step_time_quantile: step-time calibration (:mod:`dilaserve.control.step_time`)
            prices each instance's steps at this weighted quantile of its recent measured
            over profiled step times (0.5: the weighted median). On a busy machine the
            ratio is bimodal (a step that gets a core, or one that waits for one), and a
            queue waits for the slow ones. Inert in a simulation that steps at the profile
            (every ratio is 1).
        step_time_estimator: ``"quantile"`` (``step_time_quantile``) or ``"mean"``: each
            instance's steps are priced at their measured over profiled seconds, each
            step's ratio clipped at its window's 90th percentile (one stall cannot move
            it). A queue waits for the mean step, which on a bimodal machine no quantile
            measures; the server uses the mean. Inert where every ratio is 1.
        step_time_hold_s: a TP degree's step-time factor is the highest estimate of the
            last this many seconds (0: the latest): a spell of light traffic on a loaded
            machine runs its steps fast, between the busy processes, and a burst then runs
            at its share of a core; the server holds for 60 s. Inert where every ratio is 1.
        max_step_ms: a batch is not grown past the tokens whose step, priced as a full
            recompute on the calibrated profile, exceeds this many milliseconds (vLLM's
            ``max_num_batched_tokens``, in time): it bounds the time between steps under
            any load, and a request that finds every batch at its cap waits, so admission
            prices the wait. An instance with no requests takes any one that fits its
            batch. None: batches grow to the instance's ``max_batch_tokens``.
        recheck_queue: with SLO-aware admission, refuse (HTTP 429, with the reason) a
            request that waits for room once the steps measured since it was admitted
            predict it will miss its SLO: admission decides a burst's arrivals before its
            first step finishes, and a waiting request that runs late only slows the
            others. Checked when step-time calibration rescales the profile, else every
            1 s. The server turns it on; off, an admitted request always runs.
    """

    thresholds: tuple[float, ...] = CANDIDATE_THRESHOLDS
    fixed_threshold: float = 0.9
    refresh_every_steps: int = 4
    load_control_interval_s: float = 0.25
    capacity_batch_grid: int = 64
    step_law: StepLaw | None = None
    quality_budget: float | None = 0.1
    admission_headroom: float = 0.1
    ration_window_s: float | None = 10.0
    ration_utilisation: float = 1.0
    deadline_spare: float = 0.5
    step_time_quantile: float = 0.5
    step_time_estimator: str = "quantile"
    step_time_hold_s: float = 0.0
    max_step_ms: float | None = None
    recheck_queue: bool = False
    # Set at run time (the tuner, the static frontier), not a flag.
    operating_point: OperatingPoint = field(default=OperatingPoint(), metadata={"cli": False})

    def __post_init__(self) -> None:
        thr = tuple(sorted(float(t) for t in self.thresholds))
        object.__setattr__(self, "thresholds", thr)
        if not thr:
            raise ValueError("ControlConfig.thresholds is empty: give at least one threshold, e.g. (0.9,)")
        if len(set(thr)) != len(thr):
            raise ValueError(f"ControlConfig.thresholds has duplicates {thr}: list each threshold once")
        if not all(0.0 < t <= 1.0 for t in thr):
            raise ValueError(f"ControlConfig.thresholds {thr} must lie in (0, 1]: they are confidences")
        if float(self.fixed_threshold) not in thr:
            raise ValueError(
                f"ControlConfig.fixed_threshold {self.fixed_threshold} is not a candidate threshold "
                f"{thr}: add it to thresholds or pick one of them"
            )
        if self.refresh_every_steps < 1:
            raise ValueError(
                f"ControlConfig.refresh_every_steps={self.refresh_every_steps}: use 1 to refresh "
                "predictions after every step, or a larger k to refresh less often"
            )
        if self.load_control_interval_s < 0:
            raise ValueError(
                f"ControlConfig.load_control_interval_s={self.load_control_interval_s} is negative: "
                "use 0 to run load control on every event"
            )
        if self.quality_budget is not None and not 0.0 <= self.quality_budget < 1.0:
            raise ValueError(
                f"ControlConfig.quality_budget={self.quality_budget} must lie in [0, 1): it is the relative "
                "accuracy loss accepted (0.1 = within 10% of the best threshold), or None for no limit"
            )
        if not 0 <= self.admission_headroom < 1:
            raise ValueError(
                f"ControlConfig.admission_headroom={self.admission_headroom} must lie in [0, 1) "
                "(the share of SLO time left kept free for requests in flight; try 0.1)"
            )
        if self.ration_window_s is not None and self.ration_window_s <= 0:
            raise ValueError(
                f"ControlConfig.ration_window_s={self.ration_window_s} must be positive (try 10), "
                "or None to turn rationing off"
            )
        if not 0 < self.ration_utilisation <= 1:
            raise ValueError(
                f"ControlConfig.ration_utilisation={self.ration_utilisation} must lie in (0, 1] "
                "(the share of the cluster's best throughput admitted work may fill; try 1.0)"
            )
        if not 0 < self.deadline_spare < 1:
            raise ValueError(
                f"ControlConfig.deadline_spare={self.deadline_spare} must lie in (0, 1) (the share of SLO "
                "time left a member keeps free while it sits a step out; try 0.5)"
            )
        bad_pins = [
            t
            for t in (self.operating_point.default, *(t for _, t in self.operating_point.pins))
            if t is not None and t not in thr
        ]
        if bad_pins:
            raise ValueError(
                f"ControlConfig.operating_point pins thresholds {bad_pins} that are not candidates {thr}: "
                "pin each tier to one of the candidate thresholds"
            )
        if not 0 < self.step_time_quantile < 1:
            raise ValueError(
                f"ControlConfig.step_time_quantile={self.step_time_quantile} must lie in (0, 1) "
                "(0.5 prices steps at the weighted median of their measured time; 0.9 at the slow tenth)"
            )
        if self.step_time_estimator not in ESTIMATORS:
            raise ValueError(
                f"ControlConfig.step_time_estimator={self.step_time_estimator!r} must be 'quantile' "
                "(steps priced at step_time_quantile of their measured time) or 'mean' (at their clipped mean)"
            )
        if self.step_time_hold_s < 0:
            raise ValueError(
                f"ControlConfig.step_time_hold_s={self.step_time_hold_s} must be >= 0 seconds (0: no hold; e.g. 60)"
            )
        if self.max_step_ms is not None and not self.max_step_ms > 0:
            raise ValueError(
                f"ControlConfig.max_step_ms={self.max_step_ms} must be positive milliseconds (e.g. 750), "
                "or None for batches as large as the instance allows"
            )
        if self.capacity_batch_grid < 1:
            raise ValueError("ControlConfig.capacity_batch_grid must be >= 1 (try 64)")

    def index_of(self, threshold: float) -> int:
        return self.thresholds.index(float(threshold))
