"""The planner's cluster is Ray's cluster: a two-node ``ray.cluster_utils.Cluster`` on one machine.

Instances land on the Ray node their spec's logical node maps to, a TP-2 never spans nodes,
a plan that moves GPUs between nodes runs as planned, and removing a node loses no request.
Each request's state stays on its instance between steps (ids and commits on the wire).
"""

import asyncio
import time

import pytest
import ray

from dilaserve.cluster import ray_local
from dilaserve.cluster.base import InstanceFailed, InstanceReady, InstanceSpec, StepAssignment, StepFinished
from dilaserve.cluster.ray_backend import RayBackend, RayBackendConfig
from dilaserve.engine import DEFAULT_CHECKPOINT, DenoisingEngine

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def two_nodes():
    """A head and one more node, two CPU slots each, on loopback; this module's alone."""
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    ray_local.loopback_only()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="module")
def requests():
    """Fresh request states of the embedded model (no model loaded in the driver)."""
    engine = DenoisingEngine.from_pretrained(DEFAULT_CHECKPOINT)
    prompt = "arith : + 1 - 1 : zero one two three four five six seven"
    return lambda n, tag: [engine.new_request(prompt, 64, request_id=f"{tag}-{i}") for i in range(n)]


class Driver:
    """A RayBackend on this test's event loop, its events collected."""

    def __init__(self, **cfg):
        self.backend = RayBackend(RayBackendConfig(str(DEFAULT_CHECKPOINT), liveness_interval_s=0.5, **cfg))
        self.events: list = []
        self.backend.bind(self.events.append)

    async def until(self, pred, timeout_s: float = 240.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            hit = next((e for e in self.events if pred(e)), None)
            if hit is not None:
                return hit
            await asyncio.sleep(0.05)
        raise AssertionError(f"no such event within {timeout_s}s; saw {self.events}")

    async def launch(self, *specs: InstanceSpec) -> None:
        for s in specs:
            self.backend.launch_instance(s)
        for s in specs:
            ev = await self.until(lambda e, i=s.instance_id: e.instance_id == i and not isinstance(e, StepFinished))
            assert isinstance(ev, InstanceReady), ev

    async def step(self, instance_id: str, states: list) -> StepFinished | InstanceFailed:
        """One step over ``states``; a finished step's states replace them in the list."""
        n = len(self.events)
        self.backend.submit_step(instance_id, [StepAssignment(s, 0.9) for s in states])
        ev = await self.until(lambda e: e.instance_id == instance_id and e in self.events[n:])
        if isinstance(ev, StepFinished):
            states[:] = ev.states
        return ev

    async def finish(self, instance_id: str, states: list) -> None:
        """Step ``states`` to the end; the finished states replace them in the list."""
        done: dict = {}
        while active := [s for s in states if not s.finished]:
            ev = await self.step(instance_id, active)
            assert isinstance(ev, StepFinished) and not ev.errors, ev
            done.update((s.request_id, s) for s in active)
            states[:] = [done.get(s.request_id, s) for s in states]


def spec(name: str, tp: int, node: int, first: int = 0) -> InstanceSpec:
    return InstanceSpec(name, tp, node, tuple(range(first, first + tp)), 4096)


def assert_on_their_nodes(backend: RayBackend, names) -> None:
    bound = backend.nodes.bindings()
    placed = backend.placements()
    for name in names:
        node, ranks = placed[name]
        assert set(ranks) == {bound[node]}, (name, node, ranks, bound)  # one node, the planned one


def test_instances_land_on_their_nodes_and_a_plan_moves_gpus_between_nodes(two_nodes, requests):
    async def main():
        d = Driver()
        # node 0 full with one TP-2, node 1 half used
        await d.launch(spec("a", 2, 0), spec("b", 1, 1))
        bound = d.backend.nodes.bindings()
        assert len(set(bound.values())) == 2
        assert_on_their_nodes(d.backend, ["a", "b"])
        on_a, on_b = requests(2, "a"), requests(1, "b")
        await asyncio.gather(d.finish("a", on_a), d.finish("b", on_b))
        assert all(s.steps_done == len(s.thresholds_used) >= 2 for s in on_a + on_b)
        assert not d.backend._instances["a"].held  # finished requests leave nothing held
        # the plan: the TP-2 moves to node 1, node 0 takes two TP-1
        d.backend.stop_instance("a")
        d.backend.stop_instance("b")
        await d.launch(spec("c", 2, 1), spec("d", 1, 0, 0), spec("e", 1, 0, 1))
        assert_on_their_nodes(d.backend, ["c", "d", "e"])
        assert d.backend.placements()["c"][1][0] == bound[1]
        await d.finish("c", requests(1, "c"))
        await d.backend.shutdown()

    asyncio.run(main())


def test_a_gpu_the_node_lacks_fails_the_launch_with_the_fix(two_nodes):
    async def main():
        d = Driver()
        d.backend.launch_instance(spec("big", 4, 0))
        ev = await d.until(lambda e: e.instance_id == "big", 30)
        assert isinstance(ev, InstanceFailed) and "--slots-per-node" in ev.reason
        await d.backend.shutdown()

    asyncio.run(main())


def test_removing_a_node_loses_no_request(two_nodes, requests):
    async def main():
        d = Driver(launch_timeout_s=120.0)
        await d.launch(spec("x", 1, 0), spec("y", 1, 1))
        on_x, on_y = requests(2, "x"), requests(2, "y")
        for _ in range(2):
            await asyncio.gather(d.step("x", on_x), d.step("y", on_y))
        lost_node = d.backend.nodes.bindings()[1]
        worker_node = next(n for n in two_nodes.worker_nodes if n.node_id == lost_node)
        two_nodes.remove_node(worker_node)
        failed = await d.until(lambda e: isinstance(e, InstanceFailed) and e.instance_id == "y", 120)
        assert failed.spec.node == 1
        # the driver's copies are the last finished step: they go on on the other node
        assert all(s.steps_done == 2 and not s.finished for s in on_y)
        both = on_x + on_y
        await d.finish("x", both)
        assert all(s.finished and s.steps_done == len(s.thresholds_used) for s in both)
        assert {s.request_id for s in both} == {"x-0", "x-1", "y-0", "y-1"}
        # a node that joins takes the lost node's place in the plan
        two_nodes.add_node(num_cpus=2)
        await d.launch(spec("y2", 1, 1))
        new_node = d.backend.nodes.bindings()[1]
        assert new_node != lost_node and d.backend.placements()["y2"][1] == (new_node,)
        await d.backend.shutdown()

    asyncio.run(main())
