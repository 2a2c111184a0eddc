import logging
from dataclasses import replace

import pytest

from dilaserve.cluster.base import InstanceReady, InstanceStopped, StepFinished
from dilaserve.predict.base import OneShotPredictor
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.schedule import SchedulerPolicy, policies
from dilaserve.schedule.observer import SchedulerObserver
from tests.builders.schedule import SPT, arrive, build_scheduler, cluster, finish_step, spec
from tests.control.builders import default_profile, make_request
from tests.schedule.fake_backend import RecordingBackend


def test_request_larger_than_any_batch_is_rejected(caplog):
    sched, be = cluster(specs=[spec("a", max_batch=300), spec("b", 2, max_batch=350)])
    with caplog.at_level(logging.WARNING):
        arrive(sched, make_request("big", prompt=336))  # 400 tokens
    out = sched.outcomes[-1]
    assert (out.request_id, out.status) == ("big", "rejected") and "batch limit 350" in out.reason
    assert "big" not in sched.requests and "exceed the largest instance batch" in caplog.text


def test_stopped_instance_never_drops_its_requests():
    sched, be = cluster(specs=[spec("a")])
    r = arrive(sched, make_request("r0"))
    sched.handle(InstanceStopped(1.0, "a"))
    assert r.instance is None and sched.deferred == [r] and "r0" in sched.requests


def test_unknown_events_are_logged_not_raised(caplog):
    class Mystery:  # an event type the scheduler does not know (e.g. from a newer backend)
        time = 1.0

    sched, be = cluster(specs=[spec("a")])
    with caplog.at_level(logging.ERROR):
        sched.handle(Mystery())
    assert "ignoring unknown event" in caplog.text and sched.now == 1.0
    # Nothing was half-handled: the next request is placed and stepped as usual.
    assert arrive(sched, make_request("r0")).instance == "a" and be.last_batch("a")[0].state.request_id == "r0"


def test_a_step_from_an_unknown_instance_is_logged_and_ignored(caplog):
    sched, be = cluster(specs=[spec("a")])
    with caplog.at_level(logging.ERROR):
        sched.handle(StepFinished(1.0, "ghost", ()))
    assert "unknown instance ghost" in caplog.text
    assert arrive(sched, make_request("r0")).instance == "a"


def test_policy_registry():
    assert set(policies.names()) >= {
        "infaas",
        "llumnix",
        "dilaserve",
        "dilaserve-paper",
        "dilaserve-paper-no-load-control",
        "dilaserve-paper-no-reconfig",
        "dilaserve-paper-oneshot",
        "dilaserve-paper-migrate-any-step",
        "oracle",
        "dilaserve-no-admission",
        "dilaserve-paper+admission",
        "fixed@0.7",
    }
    with pytest.raises(ValueError, match="choose one of"):
        policies.get("nope")
    with pytest.raises(ValueError, match="needs a oracle predictor"):
        build_scheduler(RecordingBackend(), "oracle", OneShotPredictor(SPT))
    custom = SchedulerPolicy(
        "custom", dispatch="least_tokens", selection="fixed", load_control="none", admission="all", predictor=None
    )
    sched = build_scheduler(RecordingBackend(), custom)
    assert sched.policy.name == "custom"
    # Admission predicts a fixed threshold's latency, so it needs a predictor too.
    with pytest.raises(ValueError, match="admission 'slo' needs a StepPredictor"):
        build_scheduler(RecordingBackend(), replace(custom, admission="slo"))
    assert "fixed@0.7+admission" in policies.names()


def test_cancel_frees_the_slot_and_drops_the_in_flight_result():
    sched, be = cluster(specs=[spec("a", max_batch=300)])
    arrive(sched, make_request("r0", prompt=168, gen=32))
    r1 = arrive(sched, make_request("r1", prompt=168, gen=32))  # deferred: no room
    assert sched.cancel("r0")
    assert be.released == [("a", ["r0"])]
    assert sched.outcomes[-1].status == "cancelled" and not sched.outcomes[-1].met_slo
    # r0's step was in flight; its result arrives after the cancel and is dropped quietly,
    # and the freed room goes to the deferred request.
    batch = be.last_batch("a")
    sched.handle(StepFinished(0.1, "a", tuple(x.state for x in batch)))
    assert "r0" not in sched.requests and r1.instance == "a"
    assert [x.state.request_id for x in be.last_batch("a")] == ["r1"]
    assert not sched.cancel("r0") and sched.cancel("r1") and sched.in_flight == 0


class Watcher(SchedulerObserver):
    """A scheduler observer that records what it is told, and when."""

    def __init__(self, sched_box):
        self.box, self.calls = sched_box, []

    def on_step(self, ev):
        # the step is reported before the scheduler adopts it: no outcome for it yet
        self.calls.append(("step", ev.instance_id, len(self.box[0].outcomes)))

    def on_outcome(self, outcome):
        self.calls.append(("outcome", outcome.request_id, outcome.status))

    def on_migration(self, rid, src, dst):
        self.calls.append(("migration", rid, src, dst))

    def on_plan(self, plan):
        self.calls.append(("plan", plan))

    def on_instance(self, iid, ready):
        self.calls.append(("instance", iid, ready))


def test_observer_is_told_of_steps_outcomes_migrations_instances_and_plans():
    box = []
    w = Watcher(box)
    sched, be = cluster(specs=[spec("a")], observer=w)
    box.append(sched)
    assert w.calls == [("instance", "a", True)]
    arrive(sched, make_request("r0", use_cache=False))
    arrive(sched, make_request("r1", use_cache=False))
    sched.start([spec("b")])
    sched.handle(InstanceReady(0.0, "b"))
    finish_step(sched, be, "a", 0.1)
    migrated = [c for c in w.calls if c[0] == "migration"]
    assert ("step", "a", 0) in w.calls and migrated == [("migration", m[0], "a", "b") for m in be.migrations]
    assert migrated, "one of the two requests on a moves to the empty instance b"
    plan = Reconfigurator(ClusterConfig(nodes=1, gpus_per_node=2, tp_degrees=(1, 2)), default_profile()).plan_to(
        [{2: 1}], sched.pool.active_specs()
    )
    assert sched.apply_plan(plan) and w.calls[-1] == ("plan", plan)
    sched.handle(InstanceStopped(0.2, "a"))
    assert ("instance", "a", False) in w.calls
    assert sched.cancel("r0") and w.calls[-1] == ("outcome", "r0", "cancelled")
