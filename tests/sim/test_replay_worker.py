"""A server's tuner replays in a worker process: the server's own replay crosses the
process boundary, and the process scores a window as the replay in the caller does."""

from __future__ import annotations

import time
from functools import partial

from dilaserve.control.operating_point import OperatingPoint
from dilaserve.predict.replay import ReplayTable
from dilaserve.reconfig.plan import static_layout
from dilaserve.schedule.control_worker import ProcessWorker, replay_worker
from dilaserve.schedule.policies import get_policy
from dilaserve.schedule.tuner import TunerConfig
from dilaserve.schedule.window import PointJob, WindowArrival
from dilaserve.sim.window_replay import serving_replay
from tests.sim.builders import predictors, quality, small_setting, varied_dynamics


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
