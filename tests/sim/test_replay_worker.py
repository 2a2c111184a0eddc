"""A server's tuner replays in a worker process: the server's own replay crosses the
process boundary, and the process scores a window as the replay in the caller does. A
simulated run can pay the time those replays take."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.plan import static_layout
from dilaserve.schedule.control_worker import ProcessWorker, ReplayTimeConfig, replay_worker
from dilaserve.schedule.policies import get_policy
from dilaserve.schedule.tuner import TunerConfig
from dilaserve.schedule.window import PointJob, WindowArrival
from dilaserve.sim.progress import ReplayProgress
from dilaserve.sim.simulator import SimConfig, Simulator
from dilaserve.sim.window_replay import serving_replay
from tests.sim.builders import predictors, quality, small_setting, trace_case, varied_dynamics


def test_the_servers_replay_runs_in_a_worker_process_and_scores_as_inline():
    dyn = varied_dynamics()
    table = ReplayTable(dyn)
    setting = small_setting(dyn, tp_degrees=(1,))
    make = partial(serving_replay, setting, table, quality(), predictors(table), TunerConfig(), get_policy("dilaserve"))
    arrivals = tuple(WindowArrival(0.02 * i, 200, 256, 0.6, 0, 0.0) for i in range(200))
    job = PointJob(
        arrivals, tuple(static_layout(setting.cluster, 1)), (OperatingPoint.static(0.5), OperatingPoint.static(0.9))
    )
    inline = job.run(make())
    worker = replay_worker(make, cpu_share=0.05)
    assert isinstance(worker, ProcessWorker)
    try:
        end = time.monotonic() + 120
        while not worker.submit("tuning", job):  # not before the child has built its replay
            assert time.monotonic() < end, "the worker process never became ready"
            time.sleep(0.1)
        got = []
        while not got and time.monotonic() < end:
            got = worker.poll()
            time.sleep(0.05)
        assert got == [("tuning", inline)]
        assert worker.stats().jobs == 1 and worker.stats().cpu_s > 0
    finally:
        worker.close()


def test_a_replay_that_cannot_cross_a_process_runs_inline_with_a_warning(caplog):
    unpicklable = lambda: None  # noqa: E731 (a lambda cannot be pickled)
    assert replay_worker(unpicklable, cpu_share=0.05) is None
    assert "cannot run in a worker process" in caplog.text


def test_a_simulated_run_adopts_a_tuning_only_once_its_modeled_replays_are_done():
    table, setting, wl, slo = trace_case([("low", 10, 0.3), ("high", 10, 1.0)])
    tuner = TunerConfig(interval_s=4.0, window_s=4.0, min_arrivals=5, sample=1.0, rise_window_s=2.0)

    preds = replace(predictors(table), quality=quality())  # a quality table: the tuner replays

    def run(control: ReplayTimeConfig):
        cfg = SimConfig(tuner=tuner, control=control)
        return Simulator(setting, ReplayProgress(table, quality(), seed=0), preds, cfg).run(
            "dilaserve-no-reconfig", wl, slo
        )

    free, slow, never = run(ReplayTimeConfig()), run(ReplayTimeConfig(0.002)), run(ReplayTimeConfig(1000.0))
    assert free.tunings and slow.tunings and not never.tunings  # never back within the run
    for res in (free, slow, never):
        assert res.summary.finished + res.summary.rejected == len(wl)  # nothing lost while the tuner waits
