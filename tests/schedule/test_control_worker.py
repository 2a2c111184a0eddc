"""Control beside the step loop: the tuner's replays run in a worker, a result is adopted
when it comes back, tunings never queue, and a process worker keeps a CPU budget."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import pytest

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.schedule.control_worker import BudgetConfig, ControlWorker, ProcessWorker
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
    assert tuner.pending and worker.busy and not tuner.history
    assert tuner.collect(10.2, OperatingPoint.adaptive()) is None  # still running: the point stays
    worker.finish()
    assert tuner.collect(10.4, OperatingPoint.adaptive()) == BEST
    assert not tuner.pending and tuner.history[-1][:2] == (10.0, BEST.label)


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
    assert tuner.collect(25.0, OperatingPoint.adaptive()) is None and not tuner.history


def test_a_rise_replaces_the_running_tuning_and_turns_admission_on_at_once():
    tuner, worker, replay = _held_tuner(rise_window_s=2.5)
    open_point = OperatingPoint.adaptive().with_admit(False)
    for i in range(105):  # 10 a second; the first tuning (10 s) comes back at once
        now = i / 10
        tuner.observe(make_request(f"a{i}", arrival=now), now)
        tuner.maybe_tune(now, LAYOUT, open_point)
        if worker.running:
            worker.finish()
            tuner.collect(now, open_point)
    slow = worker.running
    assert slow is None and tuner.history
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


def _constant(arrivals, layout, points, sample=None, warm=False, floor=None):
    return [float(len(arrivals))] * len(points)


def make_constant():
    """Builds the child's evaluator (module level: the child process imports it)."""
    return _constant


def _spin(arrivals, layout, points, sample=None, warm=False, floor=None):
    time.sleep(60)
    return [0.0] * len(points)


def make_spin():
    return _spin


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
    finally:
        worker.close()


def test_the_budget_is_validated_with_a_fix():
    with pytest.raises(ValueError, match="--control-cpu-share"):
        BudgetConfig(cpu_share=0.0)


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
