"""Control beside the step loop: the tuner's replays run in a worker, a result is adopted
when it comes back, tunings never queue, and a process worker keeps a CPU budget."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from dataclasses import replace

import pytest

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.schedule.control_worker import (
    BudgetConfig,
    ClockedWorker,
    ControlWorker,
    CpuBudget,
    ProcessWorker,
    ReplayTimeConfig,
)
from dilaserve.schedule.tuner import OperatingPointTuner, TunerConfig
from dilaserve.schedule.window import PointJob, WindowArrival
from tests.control.builders import make_request
from tests.schedule.test_tuner import LAYOUT, ScriptedReplay, _fill

BEST = OperatingPoint.static(0.8)


def _best_is_08(p: OperatingPoint) -> float:
    return 0.9 if p == BEST else 0.5


class HeldWorker(ControlWorker):
    """A worker that holds each job until :meth:`finish` runs it (a slow replay)."""

    def __init__(self, evaluate):
        self.evaluate, self.running, self.done, self.cancelled = evaluate, None, [], 0

    @property
    def busy(self) -> bool:
        return self.running is not None

    def submit(self, tag, job) -> bool:
        if self.running is not None:
            return False
        self.running = (tag, job)
        return True

    def cancel(self) -> None:
        self.running, self.cancelled = None, self.cancelled + 1

    def finish(self) -> None:
        tag, job = self.running
        self.running = None
        self.done.append((tag, job.run(self.evaluate)))

    def poll(self):
        done, self.done = self.done, []
        return done


def _held_tuner(**cfg):
    replay = ScriptedReplay(_best_is_08)
    worker = HeldWorker(replay)
    config = TunerConfig(
        **{"interval_s": 10, "window_s": 10, "sample": 1.0, "min_arrivals": 10, "max_backoff": 1, **cfg}
    )
    return OperatingPointTuner(replay, (0.7, 0.8, 0.9), config, worker=worker), worker, replay


def test_a_tuning_is_adopted_when_its_result_comes_back_not_before():
    tuner, worker, replay = _held_tuner()
    _fill(tuner, 50, 0.0, 9.0)
    assert tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive()) is None  # out with the worker
    assert tuner.pending and worker.busy and not tuner.records
    assert tuner.collect(10.2, OperatingPoint.adaptive()) is None  # still running: the point stays
    worker.finish()
    assert tuner.collect(10.4, OperatingPoint.adaptive()) == BEST
    assert not tuner.pending and (tuner.records[-1].time, tuner.records[-1].point) == (10.0, BEST.label)


def test_a_due_tuning_is_skipped_while_one_runs_and_a_stale_result_is_dropped():
    tuner, worker, replay = _held_tuner()
    _fill(tuner, 50, 0.0, 9.0)
    tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive())
    first = worker.running
    _fill(tuner, 50, 10.0, 19.5)
    tuner.maybe_tune(20.0, LAYOUT, OperatingPoint.adaptive())
    assert worker.running is first  # no second tuning queued behind the first
    worker.finish()
    # back more than an interval after its window: the load it replayed is gone
    assert tuner.collect(25.0, OperatingPoint.adaptive()) is None and not tuner.records


def _steady(tuner: OperatingPointTuner, worker: HeldWorker, point: OperatingPoint, n: int) -> None:
    """``n`` arrivals at 10 a second from 0 s; each tuning due comes back at once."""
    for i in range(n):
        now = i / 10
        tuner.observe(make_request(f"a{i}", arrival=now), now)
        tuner.maybe_tune(now, LAYOUT, point)
        if worker.running:
            worker.finish()
            tuner.collect(now, point)


def test_a_rise_replaces_the_running_tuning_and_turns_admission_on_at_once():
    tuner, worker, replay = _held_tuner(rise_window_s=2.5)
    open_point = OperatingPoint.adaptive().with_admit(False)
    _steady(tuner, worker, open_point, 105)
    slow = worker.running
    assert slow is None and tuner.records
    # a tuning runs long (held); then 60 arrivals a second
    _fill(tuner, 5, 10.5, 10.9)
    tuner._last = 0.0  # the next call is due
    tuner.maybe_tune(11.0, LAYOUT, open_point)
    slow = worker.running
    moved = None
    for i in range(60):
        now = 11.0 + i / 60
        tuner.observe(make_request(f"b{i}", arrival=now), now)
        moved = tuner.maybe_tune(now, LAYOUT, open_point) or moved
        if tuner.rises:
            break
    assert tuner.rises and worker.cancelled == 1 and worker.running is not slow
    assert moved is not None and moved.admit  # admission is back before the replay returns


def test_a_rise_waits_for_the_running_tuning_of_an_earlier_rise():
    tuner, worker, replay = _held_tuner(rise_window_s=2.5)
    point = OperatingPoint.adaptive()
    _steady(tuner, worker, point, 100)
    # a ramp: 40, then 80 arrivals a second; the first rise's tuning is held
    ramp = [10.0 + i / 40 for i in range(40)] + [11.0 + i / 80 for i in range(160)]
    first = None
    for k, now in enumerate(ramp):
        tuner.observe(make_request(f"b{k}", arrival=now), now)
        tuner.maybe_tune(now, LAYOUT, point)
        first = first or (worker.running if tuner.rises else None)
    # the rise replaced the tuning of the window due at 10 s, and no later arrival replaced it
    assert len(tuner.rises) == 1 and worker.running is first and worker.cancelled == 1
    worker.finish()
    tuner.collect(ramp[-1], point)
    assert tuner.records[-1].time == tuner.rises[0]  # the rise's own tuning, adopted
    # the rate kept rising past what that tuning chose on: the next arrival trips a new rise
    now = ramp[-1] + 1 / 80
    tuner.observe(make_request("c", arrival=now), now)
    tuner.maybe_tune(now, LAYOUT, point)
    assert len(tuner.rises) == 2 and worker.running is not None


def _constant(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
    return [float(len(arrivals))] * len(points)


def make_constant():
    """Builds the child's evaluator (module level: the child process imports it)."""
    return _constant


def _spin(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
    time.sleep(60)
    return [0.0] * len(points)


def make_spin():
    return _spin


def _own_niceness(arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()):
    return [float(os.nice(0))] * len(points)


def make_own_niceness():
    return _own_niceness


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _job(n: int = 5) -> PointJob:
    arrivals = tuple(WindowArrival(0.1 * i, 100, 64, 1.0, 0, 0.0) for i in range(n))
    return PointJob(arrivals, tuple(LAYOUT), (OperatingPoint.adaptive(), BEST))


def _wait_result(worker: ProcessWorker, timeout_s: float = 60.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = worker.poll()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("the worker process returned nothing")


def _ready(worker: ProcessWorker) -> None:
    end = time.monotonic() + 60
    while not worker.ready:
        assert time.monotonic() < end, "the worker process never became ready"
        worker.poll()
        time.sleep(0.05)


def test_a_process_worker_runs_jobs_beside_the_caller_within_its_cpu_budget():
    clock = Clock()
    worker = ProcessWorker(make_constant, BudgetConfig(cpu_share=0.05), clock=clock)
    try:
        _ready(worker)
        assert worker.submit(1, _job(5)) and worker.busy
        assert not worker.submit(2, _job(5))  # one job at a time
        assert _wait_result(worker) == [(1, [5.0, 5.0])]
        stats = worker.stats()
        assert stats.jobs == 1 and stats.skipped == 1 and stats.cpu_s >= 0
        # the next job waits cpu_s / cpu_share after the last one came back
        wait = stats.cpu_s / 0.05
        if wait > 0:
            assert not worker.submit(3, _job(7))
            clock.t += wait + 1e-6
        assert worker.submit(4, _job(7))
        assert _wait_result(worker) == [(4, [7.0, 7.0])]
    finally:
        worker.close()


def test_a_job_past_its_limit_is_cancelled_and_the_next_replays_less():
    clock = Clock()
    worker = ProcessWorker(make_spin, BudgetConfig(job_limit_s=5.0), clock=clock)
    try:
        _ready(worker)
        assert worker.submit(1, _job())
        clock.t = 6.0
        assert worker.poll() == [] and not worker.busy
        assert worker.scale == 0.5 and worker.stats().dropped == 1
        # The killed job is charged the 6 s it ran: at 5% of a core the next waits 120 s.
        _ready(worker)
        assert not worker.submit(2, _job())
        clock.t = 6.0 + 6.0 / 0.05
        assert worker.submit(3, _job())
    finally:
        worker.close()


def test_a_quick_job_after_an_overrun_lets_the_next_replay_the_whole_sample_again():
    clock = Clock()
    worker = ProcessWorker(make_constant, BudgetConfig(job_limit_s=8.0, cpu_share=1.0), clock=clock)
    try:
        _ready(worker)
        worker.scale = 0.25  # as after two overruns
        assert worker.submit(1, _job())
        assert _wait_result(worker)  # back at once on the frozen clock: well within the limit
        assert worker.scale == 0.5
        clock.t += 1.0
        assert worker.submit(2, _job())
        clock.t += 1.5  # back in 1.5 s, past an eighth of the 8-s limit: it stays
        assert _wait_result(worker) and worker.scale == 0.5
    finally:
        worker.close()


@pytest.mark.skipif(not hasattr(os, "nice"), reason="no process priorities on this platform")
def test_the_replays_run_at_a_lower_cpu_priority_than_the_steps():
    """On shared cores a replay yields the CPU to the server's steps (BudgetConfig.niceness)."""
    server = os.nice(0)
    for niceness, expected in ((10, min(server + 10, 19)), (0, server)):
        worker = ProcessWorker(make_own_niceness, BudgetConfig(cpu_share=1.0, niceness=niceness), clock=Clock())
        try:
            _ready(worker)
            assert worker.submit(1, _job())
            assert _wait_result(worker) == [(1, [float(expected)] * 2)]
        finally:
            worker.close()


def test_the_budget_is_validated_with_a_fix():
    with pytest.raises(ValueError, match="niceness"):
        BudgetConfig(niceness=20)
    with pytest.raises(ValueError, match="--control-cpu-share"):
        BudgetConfig(cpu_share=0.0)
    with pytest.raises(ValueError, match="--control-burst-s"):
        BudgetConfig(burst_s=-1.0)


def test_a_cancel_never_waits_on_the_new_process_start(monkeypatch):
    """A spawned child's start can take seconds on a busy machine (its pickled replay waits
    for the child's interpreter); the step loop cancels replays, so the start runs on a thread
    of its own and the cancel returns at once. The replacement still comes up and runs jobs."""
    real_start = mp.get_context("spawn").Process.start
    started_on: list[str] = []

    def slow_start(self):
        started_on.append(threading.current_thread().name)
        time.sleep(2.0)
        real_start(self)

    clock = Clock()
    worker = ProcessWorker(make_spin, BudgetConfig(job_limit_s=5.0), clock=clock)
    try:
        _ready(worker)
        monkeypatch.setattr(type(worker._proc), "start", slow_start)
        assert worker.submit(1, _job())
        t0 = time.monotonic()
        worker.cancel()
        assert time.monotonic() - t0 < 1.0  # the 2 s start did not run here
        assert not worker.ready and not worker.busy
        _ready(worker)
        assert started_on == ["control-worker-start"]
    finally:
        worker.close()


class CountingReplay:
    """``_constant``, counting the calls (a job never run is never paid for)."""

    def __init__(self):
        self.calls = 0

    def __call__(
        self, arrivals, layout, points, sample=None, warm=False, floor=None, calibration=None, step_factors=()
    ):
        self.calls += 1
        return _constant(arrivals, layout, points)


def test_a_clocked_worker_returns_a_job_once_its_modeled_time_has_passed():
    clock, replay = Clock(), CountingReplay()
    # 5 arrivals x 2 candidates x a half sample = 5 replayed requests at 0.2 s each: 1 s
    worker = ClockedWorker(replay, clock, ReplayTimeConfig(s_per_request=0.2), default_sample=0.5)
    job = _job()
    assert worker.seconds(job) == pytest.approx(1.0)
    assert worker.seconds(replace(job, warm=True)) == pytest.approx(2.0)  # the arrivals run twice
    assert worker.submit("a", job) and worker.busy
    clock.t = 0.99
    assert worker.poll() == [] and replay.calls == 0  # not back yet: nothing was replayed
    assert not worker.submit("b", job)  # one job at a time, never a queue
    clock.t = 1.0
    assert worker.poll() == [("a", job.run(_constant))] and not worker.busy
    assert worker.stats().jobs == 1 and worker.stats().skipped == 1


def test_a_clocked_worker_never_runs_a_cancelled_job_and_keeps_its_budget():
    clock, replay = Clock(), CountingReplay()
    worker = ClockedWorker(replay, clock, ReplayTimeConfig(s_per_request=0.2, cpu_share=0.25), default_sample=0.5)
    worker.submit("a", _job())  # 1 s of replays
    clock.t = 0.5
    worker.cancel()  # half of it ran: at a quarter of a core, the next starts 2 s after it began
    assert not worker.submit("b", _job())
    clock.t = 5.0
    assert worker.poll() == [] and replay.calls == 0 and worker.stats().dropped == 1
    assert worker.submit("b", _job())
    clock.t = 6.0
    assert [tag for tag, _ in worker.poll()] == ["b"] and replay.calls == 1
    clock.t = 8.99  # b began at 5 and took 1 s
    assert not worker.submit("c", _job())
    clock.t = 9.0
    assert worker.submit("c", _job())


def test_a_budget_without_a_burst_waits_for_each_jobs_share():
    budget = CpuBudget(share=0.1, burst_s=0.0, now=0.0)
    assert budget.ready(0.0)
    budget.charge(1.0, 0.0)
    assert not budget.ready(9.99) and budget.ready(10.0)  # 1 s at a tenth of a core
    budget.charge(1.0, 50.0)  # idle for 40 s saved nothing
    assert not budget.ready(59.99) and budget.ready(60.0)


def test_a_budget_saves_up_while_idle_and_spends_it_on_a_burst():
    budget = CpuBudget(share=0.1, burst_s=2.0, now=0.0)
    for t in (0.0, 1.0, 2.0):  # a full bucket: three 1-s jobs back to back
        assert budget.ready(t)
        budget.charge(1.0, t)
    assert not budget.ready(3.0)  # 2 s saved, 0.2 s refilled, 3 s spent
    assert budget.ready(10.0)  # the overdraft of 0.8 s is paid back at a tenth of a core
    budget.charge(1.0, 10.0)
    budget.refund(0.5, 10.0)  # cancelled half-way
    assert not budget.ready(14.99) and budget.ready(15.0)
    budget.charge(0.0, 1000.0)
    assert budget._credit == 2.0  # never more than the burst, however long it was idle


def test_a_clocked_worker_with_a_burst_tunes_a_rise_after_a_quiet_spell_at_once():
    jobs = []
    for burst in (0.0, 3.0):
        clock = Clock()
        # 1 s per job at a twentieth of a core: without a burst the next waits 20 s
        worker = ClockedWorker(
            CountingReplay(), clock, ReplayTimeConfig(s_per_request=0.2, cpu_share=0.05, burst_s=burst), 0.5
        )
        started = 0
        for t in (0.0, 60.0, 61.0, 62.0, 63.0):
            clock.t = t
            worker.poll()
            started += worker.submit(t, _job())
        jobs.append(started)
    # Without a burst the 60-s job waits out the first's share and the rise's jobs are refused;
    # the quiet minute saved up 3 s, so the burst runs back to back until it is spent (the
    # last job overdraws, and the next waits until that is paid back).
    assert jobs == [2, 5]


def test_a_tuner_on_a_clocked_worker_keeps_its_point_until_the_replay_is_back():
    clock = Clock()
    replay = ScriptedReplay(_best_is_08)
    worker = ClockedWorker(replay, clock, ReplayTimeConfig(s_per_request=0.01))
    config = TunerConfig(interval_s=10, window_s=10, sample=1.0, min_arrivals=10, max_backoff=1)
    tuner = OperatingPointTuner(replay, (0.7, 0.8, 0.9), config, worker=worker)
    _fill(tuner, 50, 0.0, 9.0)
    clock.t = 10.0
    assert tuner.maybe_tune(10.0, LAYOUT, OperatingPoint.adaptive()) is None
    took = worker.seconds(worker._out[1])
    assert took > 1.0  # every candidate on the 50 arrivals
    clock.t = 10.0 + took / 2
    assert tuner.collect(clock.t, OperatingPoint.adaptive()) is None and tuner.pending
    clock.t = 10.0 + took
    assert tuner.collect(clock.t, OperatingPoint.adaptive()) == BEST


def test_the_replay_time_is_validated_with_a_fix():
    with pytest.raises(ValueError, match="e.g. 0.001"):
        ReplayTimeConfig(s_per_request=-1)
    with pytest.raises(ValueError, match="share of one core"):
        ReplayTimeConfig(s_per_request=0.001, cpu_share=0)
    with pytest.raises(ValueError, match="--control-burst-s"):
        ReplayTimeConfig(s_per_request=0.001, burst_s=-1)
