"""The threshold controller: admission, predictions, load control and threshold selection.

The controller computes what every threshold policy needs (predicted remaining steps,
remaining times, loads, capacity) and leaves each decision to a named piece
(:mod:`dilaserve.control.policies`): the threshold selection, the load control and the
admission check. Fixed-threshold baselines use the ``fixed`` selection: no predictor is
called and load control is off.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import partial

import numpy as np

from dilaserve.control.batch_cost import mixed_step_prices
from dilaserve.control.capacity_price import per_work_optimum
from dilaserve.control.config import ControlConfig
from dilaserve.control.cost_model import (
    CacheStepLatency,
    CapacityModel,
    RequestShape,
    append_seconds,
    appends_left,
    recompute_steps_over_life,
    request_load,
    split_cost_one,
)
from dilaserve.control.load_pass import LoadPass
from dilaserve.control.operating_point import OperatingPoint
from dilaserve.control.policies import Rejection, admission_policies, load_controls, selection_policies
from dilaserve.control.policies.admission import QueueAhead, WaitingRoom, queued_finish_s
from dilaserve.control.predictions import PredictionCache, StepCalibration
from dilaserve.control.quality_budget import quality_allowed
from dilaserve.control.rationing import WorkRation
from dilaserve.control.request import TrackedRequest
from dilaserve.control.thresholds import pinned_threshold
from dilaserve.engine.state import StepKind
from dilaserve.predict.base import StepPredictor
from dilaserve.profile.types import LatencyProfile

log = logging.getLogger(__name__)

#: How remaining steps are priced (see ``ThresholdController``).
STEP_PRICINGS = ("paper", "mixed_batch")
#: Requests memoised at most (refused ones never finish: the memo empties at this many).
_FN_MEMO_MAX = 4096


class ThresholdController:
    """Args:
    config: candidate thresholds and control settings.
    profile: step latency per TP degree.
    predictor: remaining-step predictor (None only for the ``fixed`` selection).
    selection / load_control / admission: names of the policy pieces
        (``selection_policies``, ``load_controls``, ``admission_policies``).
    accuracy: measured accuracy per candidate threshold (the threshold-quality table);
        with ``apply_quality_budget`` the candidates are limited to those within
        ``config.quality_budget`` of the best.
    step_pricing: how a request's remaining steps are priced on an instance: ``paper``
        (cache steps at ``LP_cache[B x n]``, recompute steps at ``LP_recompute[tokens]``)
        or ``mixed_batch`` (each step also pays the other pass its batch-mates trigger,
        :func:`~dilaserve.control.batch_cost.mixed_step_prices`).
    calibrate: correct predictions by the steps finished requests really took
        (:class:`~dilaserve.control.predictions.PredictionCache`).
    ration: under overload, admit the arrivals with the most expected hits per unit of
        work (:mod:`~dilaserve.control.rationing`; ``config.ration_window_s`` None turns it
        off too). Needs load control (its throughput) and admission.
    refresh_every_steps: overrides ``config.refresh_every_steps``.
    """

    def __init__(
        self,
        config: ControlConfig,
        profile: LatencyProfile,
        predictor: StepPredictor | None = None,
        *,
        selection: str = "keep_quality",
        load_control: str = "capacity_price",
        admission: str = "all",
        accuracy: Mapping[float, float] | None = None,
        apply_quality_budget: bool = True,
        step_pricing: str = "mixed_batch",
        calibrate: bool = True,
        ration: bool = True,
        refresh_every_steps: int | None = None,
    ):
        if step_pricing not in STEP_PRICINGS:
            raise ValueError(f"unknown step pricing {step_pricing!r}: choose one of {STEP_PRICINGS}")
        self.step_pricing = step_pricing
        self.config = config
        self.profile = profile
        self.thresholds = np.array(config.thresholds)
        self.selection = selection_policies.get(selection)(config)
        self.slo_aware = self.selection.needs_predictor
        #: Admission predicts a request's latency at the threshold it will run, whatever
        #: picks that threshold: a fixed-threshold policy with admission predicts too.
        self.admission_on = admission != "all"
        self.predicting = self.slo_aware or self.admission_on
        if self.predicting and predictor is None:
            need = f"threshold selection {selection!r}" if self.slo_aware else f"admission {admission!r}"
            raise ValueError(
                f"{need} needs a StepPredictor: pass one, or use the fixed selection with admission 'all' "
                "(a fixed-threshold policy without admission)"
            )
        # Loads and predicted latencies need predictions: fixed thresholds run neither.
        self.load_control = load_controls.get(load_control if self.slo_aware else "none")(config)
        self.load_control_on = self.slo_aware and load_control != "none"
        self.admission = admission_policies.get(admission)(config)
        budget_mask = np.ones(len(self.thresholds), dtype=bool)
        if apply_quality_budget and config.quality_budget is not None:
            if accuracy is None:
                log.warning(
                    "no threshold-quality table: the quality budget %.2f cannot be applied, so every "
                    "candidate threshold %s is allowed (`make artifacts` builds the table)",
                    config.quality_budget,
                    config.thresholds,
                )
            budget_mask = quality_allowed(config.thresholds, accuracy, config.quality_budget)
        #: Candidates the quality budget allows (every request's allowed set starts here).
        self.budget_mask = budget_mask
        #: Which thresholds new arrivals are pinned to, per tier (:meth:`set_point`).
        self.point: OperatingPoint = config.operating_point
        #: Accuracy per candidate (ascending), for load controls that price quality; None
        #: without a table (or one that lacks a candidate), and such a piece then runs
        #: without its outlook.
        self.accuracy = None
        if accuracy is not None and all(float(t) in accuracy for t in config.thresholds):
            self.accuracy = np.array([float(accuracy[float(t)]) for t in config.thresholds])
        if self.load_control_on and self.load_control.needs_outlook and self.accuracy is None:
            log.warning(
                "load control %r prices accuracy but there is no threshold-quality table for %s: it runs "
                "without the price (`make artifacts` builds the table)",
                load_control,
                config.thresholds,
            )
        self.capacity = CapacityModel(profile, config.capacity_batch_grid)
        self.load_pass = LoadPass(config, profile, self.load_control, self.capacity, self.accuracy)
        #: Rationing under overload needs load control's throughput and predictions.
        self.ration = (
            WorkRation(config.ration_window_s, config.ration_utilisation)
            if ration and config.ration_window_s is not None and self.load_control_on and self.admission_on
            else None
        )
        self.cache_step = CacheStepLatency(profile)
        #: request -> (its state, its prediction, the stamp, {(tp, tokens, requests): remaining fn})
        self._fn_memo: dict[TrackedRequest, tuple] = {}
        self.predictions = (
            PredictionCache(
                predictor, config.thresholds, refresh_every_steps or config.refresh_every_steps, calibrate=calibrate
            )
            if self.predicting
            else None
        )

    # ---------------------------------------------------------------- arrivals and admission
    def prepare_arrival(self, req: TrackedRequest, now: float) -> None:
        """Ready a new request for the admission check and for threshold selection: its
        allowed thresholds (client floor, quality budget, operating-point pin), its cap and
        starting threshold, whether it arrived late, and its predicted steps. It decides
        nothing about taking the request; :meth:`check_admission` does."""
        t = len(self.thresholds)
        floor = self.thresholds >= req.min_threshold - 1e-12
        if not floor.any():
            log.warning(
                "request %s: quality floor %.3f is above every candidate threshold %s; using the highest candidate",
                req.request_id,
                req.min_threshold,
                self.config.thresholds,
            )
            floor[-1] = True
        # The client's floor and the operator's budget both apply; where they leave
        # nothing (a floor below every budgeted threshold cannot happen, one above can),
        # the client's floor wins: it asked for at least that quality.
        allowed = floor & self.budget_mask
        if not allowed.any():
            allowed = floor
        allowed = self._pinned(allowed, req.min_threshold, req.priority)
        if req.slo_left(now) <= 0:
            req.late_on_arrival = True
            if self.selection.degrade_late_arrivals:
                # Nothing can meet the SLO any more: finish as fast as possible rather than drop.
                lo = int(np.argmax(allowed))
                allowed = np.zeros(t, dtype=bool)
                allowed[lo] = True
            log.warning(
                "request %s arrived %.3fs past its deadline; serving it best-effort",
                req.request_id,
                now - req.deadline,
            )
        req.allowed = allowed
        req.cap_index = t - 1 - int(np.argmax(allowed[::-1]))
        if self.slo_aware:
            req.threshold_index = req.cap_index
        else:
            req.threshold_index = self.selection.choose(allowed, req.cap_index, _never_called, 0.0)
            # A fixed threshold is the only one it runs: its remaining time is priced at it.
            req.cap_index = req.threshold_index
        if self.predicting:
            self.predictions.refresh([req])
        if self.ration is not None:
            req.ration_work, req.ration_value = self._work_and_value(req)
            self.ration.observe(now, req.ration_work, req.ration_value)

    def _work_and_value(self, req: TrackedRequest) -> tuple[float, float]:
        """``req``'s work (token-steps) and expected hits at its per-work optimum among the
        thresholds it may run: where the capacity price holds it under overload."""
        load = request_load(PredictionCache.steps_left([req]), RequestShape.of([req]))
        acc = self.accuracy if self.accuracy is not None else np.ones(len(self.thresholds))
        j = int(per_work_optimum(acc, load, req.allowed[None, :])[0])
        return float(load[0, j]), float(acc[j])

    def _pinned(self, allowed: np.ndarray, min_threshold: float, priority: int) -> np.ndarray:
        """``allowed`` narrowed to the operating point's pin for ``priority`` (unchanged where
        the tier is adaptive), lifted to the client's quality floor where the pin is below it
        (:func:`~dilaserve.control.thresholds.pinned_threshold`)."""
        pin = self.point.pin(priority)
        if pin is None:
            return allowed
        j = self.config.index_of(pinned_threshold(self.config.thresholds, pin, min_threshold))
        one = np.zeros(len(self.thresholds), dtype=bool)
        one[j] = True
        return one

    def set_point(self, point: OperatingPoint) -> None:
        """Pin new arrivals as ``point`` says from now on (requests in flight keep theirs)."""
        self.point = point

    def check_admission(
        self,
        req: TrackedRequest,
        placement: tuple[int, float, int] | None,
        now: float,
        members: Sequence[TrackedRequest] = (),
        queue: QueueAhead | None = None,
    ) -> Rejection | None:
        """Whether ``req`` (already through :meth:`prepare_arrival`) is taken: None to take it.

        ``placement`` is ``(tp, tokens, requests)`` of the instance it would join, counting
        the request itself, or None when it would wait for room; ``members`` are the
        requests already on that instance. The request is predicted at its lowest allowed
        threshold. Joining slows every member's steps, so each member that keeps its
        headroom now but would not with the newcomer counts against it: admitting buys at
        most one hit, and must not cost more than one. A request that would wait is predicted
        behind ``queue`` (:meth:`queued_finish_s`).
        """
        if not self.admission_on:
            return None
        if not self.point.admit:
            # Every arrival is taken, but one that misses even alone on an instance of this
            # TP degree is refused: no load makes it, and its work would only delay others.
            if placement is None:
                return None
            alone = self._remaining_fn(req, placement[0], float(req.tokens), 1)(self.promise_index(req))
            return self.admission.check(alone, req.slo_left(now)) if alone > req.slo_left(now) else None
        if req.late_on_arrival and self.selection.degrade_late_arrivals:
            return None  # the paper's walk serves a late arrival best-effort; others refuse it
        if self.ration is not None:
            price = self.ration.cutoff(self.load_pass.throughput)
            if req.ration_value < price * req.ration_work:
                return Rejection(
                    "the cluster is over capacity and this request's work is among the largest arriving: "
                    f"{req.ration_work:.0f} token-steps against at most {req.ration_value / price:.0f} taken now",
                    retry_after_s=self.config.ration_window_s,
                )
        predicted = None
        if placement is not None:
            tp, tokens, n = placement
            predicted = self._remaining_fn(req, tp, tokens, n)(self.promise_index(req))
            margin = 1.0 - self.config.admission_headroom
            harmed = sum(1 for m in members if self._pushed_past_slo(m, tp, tokens, n, req.tokens, margin, now))
            return self.admission.check(predicted, req.slo_left(now), harmed)
        queued = self.queued_finish_s(req, queue) if queue is not None else None
        if queued is not None:
            return self.admission.check(queued[0], req.slo_left(now), wait_s=queued[1])
        return self.admission.check(predicted, req.slo_left(now))

    def queued_finish_s(self, req: TrackedRequest, queue: QueueAhead) -> tuple[float, float] | None:
        """``(finish, wait)`` seconds from now of ``req`` waiting behind ``queue``
        (:func:`~dilaserve.control.policies.admission.queued_finish_s`): every request's steps
        at its lowest allowed threshold, each room's steps at its full batch's price on the
        (calibrated) profile. None without step predictions."""
        if req.steps_pred is None:
            return None
        j = self.promise_index(req)
        own = PredictionCache.steps_left_at(req, j)

        def steps(reqs: Sequence[TrackedRequest]) -> tuple[float, ...]:
            return tuple(
                PredictionCache.steps_left_at(r, self.promise_index(r)) for r in reqs if r.steps_pred is not None
            )

        rooms = [
            WaitingRoom(self._remaining_fn(req, tp, tokens, n)(j) / own, steps(members))
            for (tp, tokens, n), members in queue.rooms
        ]
        return queued_finish_s(rooms, steps(queue.ahead), own)

    def fits(
        self,
        req: TrackedRequest,
        placement: tuple[int, float, int],
        now: float,
        members: Sequence[TrackedRequest],
        headroom: float,
    ) -> bool:
        """Whether ``req`` (already through :meth:`prepare_arrival`) fits the instance of ``placement``
        (as in :meth:`check_admission`) with room to spare: it makes ``(1 - headroom)`` x
        its SLO time left at the threshold it is admitted on, and no member loses that
        headroom by its joining. The test slack-aware placement applies along its ranking;
        it needs step predictions."""
        tp, tokens, n = placement
        margin = 1.0 - headroom
        if self._remaining_fn(req, tp, tokens, n)(self.promise_index(req)) > margin * req.slo_left(now):
            return False
        return not any(self._pushed_past_slo(m, tp, tokens, n, req.tokens, margin, now) for m in members)

    def _pushed_past_slo(
        self, member: TrackedRequest, tp: int, tokens: float, n: int, newcomer_tokens: float, margin: float, now: float
    ) -> bool:
        """Whether ``member`` makes its SLO (times ``margin``) at its lowest allowed threshold
        on its instance as it is, but not once a newcomer of ``newcomer_tokens`` joins
        (``tokens`` and ``n`` count the newcomer)."""
        if member.steps_pred is None:
            return False
        j, left = self.promise_index(member), margin * member.slo_left(now)
        before = self._remaining_fn(member, tp, tokens - newcomer_tokens, n - 1)(j)
        return before <= left < self._remaining_fn(member, tp, tokens, n)(j)

    def promise_index(self, req: TrackedRequest) -> int:
        """The threshold index a request is admitted on: the one it will run at."""
        if not self.slo_aware:
            return req.threshold_index
        return int(np.argmax(req.allowed))

    def on_finish(self, req: TrackedRequest) -> None:
        """A request finished: what it really took calibrates the predictions."""
        self._fn_memo.pop(req, None)
        if self.predictions is not None:
            self.predictions.observe_finish(req)

    def learned_calibration(self) -> StepCalibration | None:
        """What the step predictions' calibration has learned (None without predictions)."""
        return self.predictions.learned() if self.predictions is not None else None

    def resume_calibration(self, learned: StepCalibration) -> None:
        """Calibrate the step predictions from ``learned`` on (a tuner's replay starts from the
        live control plane's calibration)."""
        if self.predictions is not None:
            self.predictions.resume(learned)

    def profile_changed(self) -> None:
        """The profile was rescaled (step-time calibration): drop what was priced on the old one."""
        self.capacity.forget()
        self.cache_step.forget()
        self._fn_memo.clear()

    def refresh(self, reqs: Sequence[TrackedRequest]) -> int:
        """Re-predict the requests whose refresh is due (one batched call)."""
        if self.predictions is None:
            return 0
        return self.predictions.refresh_due(reqs)

    # ------------------------------------------------------------ load control
    def control_load(self, reqs: Sequence[TrackedRequest], instances: Sequence[tuple[int, int]], now: float) -> None:
        """Cap every request's highest threshold so the worst-case load fits the cluster
        (:meth:`~dilaserve.control.load_pass.LoadPass.run`); nothing without load control."""
        if self.load_control_on:
            self.load_pass.run(reqs, instances, now)

    # -------------------------------------------------------------- selection
    def select(
        self, reqs: Sequence[TrackedRequest], tp: int, inst_tokens: float, inst_requests: int, now: float
    ) -> None:
        """Pick thresholds for requests placed on one TP-``tp`` instance."""
        if not reqs:
            return
        if not self.slo_aware:
            for r in reqs:
                r.threshold_index = self.selection.choose(r.allowed, r.cap_index, _never_called, 0.0)
            return
        # Request by request in plain Python (a stepped batch holds a few requests), and
        # only at the thresholds the walk visits; the numbers are those of steps_left,
        # remaining_time and walk_thresholds, bit for bit.
        for r in reqs:
            remaining = self._remaining_fn(r, tp, inst_tokens, inst_requests)
            r.threshold_index = self.selection.choose(r.allowed, r.cap_index, remaining, r.slo_left(now))

    def step_members(self, members: Sequence[TrackedRequest], tp: int, now: float) -> list[TrackedRequest]:
        """The members of a TP-``tp`` instance that its next step runs (deadline batching).

        Every member steps, unless one of them misses its SLO in the whole batch (at its
        threshold) but makes it in the batch without the members that have slack to spare:
        those that finish in the whole batch within ``1 - deadline_spare`` of their SLO time
        left, so one step's wait costs them nothing they need. They sit this step out and
        rejoin as their slack shrinks. A member that misses even in the smaller batch is not
        helped by it, and then nobody waits. Without step predictions every member steps.
        """
        if not self.slo_aware or any(m.steps_pred is None for m in members):
            return list(members)
        tokens, n = float(sum(m.tokens for m in members)), len(members)
        left = [m.slo_left(now) for m in members]
        full = [self._remaining_fn(m, tp, tokens, n)(m.threshold_index) for m in members]
        late = {i for i in range(n) if full[i] > left[i]}
        if not late:
            return list(members)
        spare = 1.0 - self.config.deadline_spare
        keep = [m for i, m in enumerate(members) if i in late or full[i] > spare * left[i]]
        if len(keep) == n:
            return list(members)
        kept_tokens = float(sum(m.tokens for m in keep))
        saved = any(
            self._remaining_fn(members[i], tp, kept_tokens, len(keep))(members[i].threshold_index) <= left[i]
            for i in late
        )
        return keep if saved else list(members)

    def _remaining_fn(self, req: TrackedRequest, tp: int, inst_tokens: float, inst_requests: int):
        """``j -> remaining seconds of req at threshold index j`` on a TP-``tp`` instance
        holding ``inst_tokens`` tokens in ``inst_requests`` requests (:func:`remaining_time`'s prices).
        Memoised per request while all it reads stands (state and step count, K/V in place,
        cap, prediction, masked tokens): selection, the step's batch and each arrival's
        check ask again within an event, and the mixed-batch price is a replay's main cost."""
        st = req.state
        stamp = (st.steps_done, st.block_cached, req.cap_index, req.masked_left, req.pred_masked)
        memo = self._fn_memo.get(req)
        if memo is None or memo[0] is not st or memo[1] is not req.steps_pred or memo[2] != stamp:
            if len(self._fn_memo) >= _FN_MEMO_MAX:
                self._fn_memo.clear()
            memo = self._fn_memo[req] = (st, req.steps_pred, stamp, {})
        key = (tp, inst_tokens, inst_requests)
        fn = memo[3].get(key)
        if fn is None:
            fn = memo[3][key] = self._price_remaining(req, tp, inst_tokens, inst_requests)
        return fn

    def _price_remaining(self, req: TrackedRequest, tp: int, inst_tokens: float, inst_requests: int):
        st = req.state  # :meth:`_remaining_fn` afresh
        if not st.use_cache:
            lp_recompute = self.profile.latency(tp, inst_tokens, StepKind.RECOMPUTE)
            return partial(_remaining_s, req, 0, False, 0.0, lp_recompute, 0.0)
        # Cache steps feed one block per request of the batch: LP_cache[B x n_reqs]; an
        # append (block-causal) feeds one block more.
        fed = float(st.block_length) * max(inst_requests, 1)
        lp_cache = self.cache_step(tp, fed)
        appends = appends_left(st)
        extra = appends * append_seconds(lp_cache, self.cache_step(tp, fed + st.block_length)) if appends else 0.0
        if self.step_pricing == "mixed_batch":
            # Batch-mates recompute (and append) about as often as this request does over its
            # life: one recompute step per block (bidirectional) or its prefill alone, and one
            # append per block after the first (block-causal).
            life = max(st.steps_done + PredictionCache.steps_left_at(req, req.cap_index), 1.0)
            share = recompute_steps_over_life(st) / life
            append_share = (st.num_blocks - 1) / life if st.block_causal else 0.0
            prices = mixed_step_prices(
                self.profile,
                tp,
                inst_requests,
                inst_tokens,
                req.tokens,
                st.block_length,
                share,
                append_share,
                st.context_tokens,
            )
            return partial(
                _remaining_s, req, st.recompute_left_lower_bound, True, prices.cache, prices.recompute, extra
            )
        lp_recompute = self.profile.latency(tp, inst_tokens, StepKind.RECOMPUTE)
        return partial(_remaining_s, req, st.recompute_left_lower_bound, True, lp_cache, lp_recompute, extra)

    def fastest_alone_s(self, req: TrackedRequest, tp_degrees: Sequence[int]) -> tuple[float, int] | None:
        """``(seconds, tp)``: the predicted remaining time of ``req`` (after :meth:`prepare_arrival`)
        alone on an idle instance of the fastest of ``tp_degrees``, at its lowest allowed
        threshold. An SLO shorter than that cannot be met whatever the load; the server
        refuses it with this figure instead of asking the client to retry. None without a
        predictor (fixed thresholds predict nothing)."""
        if not self.slo_aware or req.steps_pred is None:
            return None
        lowest = int(np.argmax(req.allowed))
        times = [
            (self._remaining_fn(req, tp, float(req.tokens), 1)(lowest), tp) for tp in tp_degrees if self.profile.has(tp)
        ]
        return min(times) if times else None

    def threshold(self, req: TrackedRequest) -> float:
        return float(self.thresholds[req.threshold_index])


def _never_called(j: int) -> float:
    raise AssertionError("fixed thresholds ask for no remaining time")


def _remaining_s(
    req: TrackedRequest,
    recompute_left: int,
    use_cache: bool,
    lp_cache: float,
    lp_recompute: float,
    extra_s: float,
    j: int,
) -> float:
    """Remaining seconds of ``req`` at threshold index ``j``: its steps left, priced as
    :func:`~dilaserve.control.cost_model.remaining_time` prices them, plus ``extra_s`` for what
    no threshold changes (its appends)."""
    t = split_cost_one(PredictionCache.steps_left_at(req, j), recompute_left, use_cache, lp_cache, lp_recompute)
    return t + extra_s if extra_s else t
