"""Instance failures in the control plane: requests re-queued, a replacement launched."""

from dilaserve.cluster.base import InstanceFailed, InstanceReady, InstanceSpec, InstanceStopped
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.reconfig.executor import PlanExecutor
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.observer import SchedulerObserver
from dilaserve.schedule.scheduler import replacement_spec
from tests.builders.schedule import arrive, cluster, spec
from tests.control.builders import default_profile, make_request


class Failures(SchedulerObserver):
    def __init__(self):
        self.seen = []

    def on_failure(self, event, resumed, replacement):
        self.seen.append((event.instance_id, event.reason, resumed, replacement))


A = InstanceSpec("a", 1, 0, (0,), 300)
B = InstanceSpec("b", 2, 0, (2, 3), 1000)


def _two_instances(**kw):
    sched, be = cluster(specs=[A, B], **kw)
    return sched, be, A


def test_a_failed_instance_is_replaced_on_its_gpus_and_its_requests_resume_elsewhere():
    watch = Failures()
    sched, be, a = _two_instances(observer=watch)
    r0 = arrive(sched, make_request("r0", prompt=168, gen=32))  # 200 tokens each
    r1 = arrive(sched, make_request("r1", prompt=168, gen=32))
    on_a = [r for r in (r0, r1) if r.instance == "a"]
    assert on_a, "least predicted latency puts one of them on the TP-1 instance"
    sched.handle(InstanceFailed(1.0, a, "worker died"))
    assert "a" not in sched.pool.slot_of
    # re-queued, and placed on b at once (it has room): none lost, none held twice
    assert all(r.instance == "b" and r.request_id in sched.requests for r in on_a)
    assert sorted(sched.pool.members[sched.pool.slot_of["b"]]) == ["r0", "r1"]
    new = be.launched[-1]
    assert new == replacement_spec(a, 1) and (new.tp, new.node, new.gpus, new.max_batch_tokens) == (
        a.tp,
        a.node,
        a.gpus,
        a.max_batch_tokens,
    )
    assert watch.seen == [("a", "worker died", len(on_a), new.instance_id)]
    sched.handle(InstanceReady(2.0, new.instance_id))
    assert sched.pool.ready[sched.pool.slot_of[new.instance_id]]
    # the replacement dies too: its replacement keeps the first instance's name
    sched.handle(InstanceFailed(3.0, new, "worker died"))
    assert be.launched[-1].instance_id == "a~2"


def test_replacement_off_re_queues_without_launching():
    sched, be, a = _two_instances(scheduler=SchedulerConfig(replace_failed_instances=False))
    launched = len(be.launched)
    sched.handle(InstanceFailed(1.0, a, "worker died"))
    assert len(be.launched) == launched and "a" not in sched.pool.slot_of
    sched.replace_failed = True  # a server turns it off at shutdown; it is a live setting
    sched.handle(InstanceFailed(1.0, B, "worker died"))
    assert be.launched[-1].instance_id == "b~1"


def test_an_instance_the_plan_stops_is_not_replaced_and_the_plan_goes_on():
    sched, be = cluster(specs=[A, InstanceSpec("c", 1, 0, (1,), 300)])
    cl = ClusterConfig(nodes=1, gpus_per_node=2, tp_degrees=(1, 2))
    specs = {s.instance_id: s for s in sched.pool.active_specs()}
    plan = Reconfigurator(cl, default_profile()).plan_to([{2: 1}], list(specs.values()))
    assert sched.apply_plan(plan) and sorted(plan.stops) == ["a", "c"]
    launched = len(be.launched)
    # a dies while it is being stopped: its GPU is the plan's, so it is not replaced
    sched.handle(InstanceFailed(1.0, specs["a"], "worker died"))
    assert be.launched[launched:] == []
    sched.handle(InstanceStopped(1.1, "c"))
    assert be.launched[launched:] == [plan.steps[0].launch]  # the plan goes on to its launch


def test_the_plan_waits_for_the_replacement_of_its_failed_launch_or_ends_without_one():
    plan = Reconfigurator(ClusterConfig(nodes=1, gpus_per_node=2, tp_degrees=(1, 2)), default_profile()).plan_to(
        [{2: 1}], [spec("a")]
    )
    launch = plan.steps[0].launch.instance_id
    ex = PlanExecutor(plan)
    ex.poll(lambda _: True)  # drains and stops what is in the way
    for i in plan.steps[0].stop_first:
        ex.on_stopped(i)
    assert [type(a).__name__ for a in ex.poll(lambda _: True)] == ["Launch"]
    ex.on_failed(launch, "stand-in")
    ex.poll(lambda _: True)
    assert not ex.done  # waiting for the stand-in
    ex.on_ready("stand-in")
    ex.poll(lambda _: True)
    assert ex.done
    again = PlanExecutor(plan)
    again.poll(lambda _: True)
    for i in plan.steps[0].stop_first:
        again.on_stopped(i)
    again.poll(lambda _: True)
    again.on_failed(launch, None)
    assert again.done
