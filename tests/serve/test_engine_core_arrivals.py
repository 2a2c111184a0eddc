"""The engine core admits a burst's arrivals a slice at a time: a step that finishes while
hundreds of arrivals wait is handled between slices, not after all of them; an arrival
withdrawn before the scheduler saw it is dropped."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from dilaserve.serve import engine_core
from dilaserve.serve.engine_core import EngineCore
from dilaserve.serve.metrics import ServeMetrics


class _Scheduler:
    """Takes every arrival, each costing the core ``cost_s``; records the order of events."""

    def __init__(self, log: list, cost_s: float):
        self.requests: dict = {}
        self.log, self.cost_s = log, cost_s

    def handle(self, ev) -> None:
        time.sleep(self.cost_s)
        self.requests[ev.request.request_id] = ev.request
        self.log.append(ev.request.request_id)

    def cancel(self, request_id, reason) -> bool:
        return False


def _core(log: list, cost_s: float = 0.002) -> EngineCore:
    core = EngineCore(lambda c: (None, None), lambda outs: None, ServeMetrics("m"), None, 4096)
    core.loop = asyncio.new_event_loop()
    core.scheduler = _Scheduler(log, cost_s)
    return core


def _req(i: int):
    return SimpleNamespace(request_id=f"r{i}", arrival=0.0)


def test_a_finished_step_is_handled_between_slices_of_a_burst(monkeypatch):
    monkeypatch.setattr(engine_core, "ARRIVAL_SLICE_S", 0.005)
    log: list = []
    core = _core(log)
    for i in range(100):  # 100 arrivals of 2 ms each: 0.2 s of admission
        core._queue_arrival(_req(i))
    core.loop.call_soon(log.append, "step finished")
    core.loop.call_soon(core.loop.stop)
    core.loop.run_forever()  # one pass: the first slice, then the step
    while core._arrivals:
        core.loop.run_until_complete(asyncio.sleep(0.01))
    core.loop.close()
    assert log.index("step finished") < 10
    assert [x for x in log if x != "step finished"] == [f"r{i}" for i in range(100)]  # in order, all


def test_an_arrival_withdrawn_before_the_scheduler_saw_it_is_dropped():
    log: list = []
    core = _core(log, cost_s=0.0)
    for i in range(3):
        core._queue_arrival(_req(i))
    core._abort("r1", "cancelled by the client")
    core.loop.run_until_complete(asyncio.sleep(0.01))
    core.loop.close()
    assert log == ["r0", "r2"]


def test_an_arrival_that_fails_does_not_stall_those_behind_it(caplog):
    log: list = []
    core = _core(log, cost_s=0.0)
    handle = core.scheduler.handle

    def fail_r1(ev):
        if ev.request.request_id == "r1":
            raise RuntimeError("boom")
        handle(ev)

    core.scheduler.handle = fail_r1
    for i in range(3):
        core._queue_arrival(_req(i))
    core.loop.run_until_complete(asyncio.sleep(0.01))
    core.loop.close()
    assert log == ["r0", "r2"] and "arrival of r1" in caplog.text
