"""The step wire format: states held where they are stepped, commits replayed by the driver."""

import pickle

import numpy as np
import pytest

from dilaserve.cluster.nodes import NodeMap, live_nodes
from dilaserve.engine import DenoisingEngine
from dilaserve.engine.step_delta import CACHED, RECOMPUTED, UNCHANGED, HeldStates, adopt_reply, sync_key
from dilaserve.model.adapters import load_diffusion_lm


@pytest.fixture(scope="module")
def two_engines(tiny_checkpoint):
    """The driver's reference engine and the 'remote' instance's (same weights)."""
    return DenoisingEngine(load_diffusion_lm(tiny_checkpoint)), DenoisingEngine(load_diffusion_lm(tiny_checkpoint))


def test_ids_and_commits_keep_the_drivers_copy_equal_to_a_local_decode(two_engines):
    local, remote = two_engines
    prompts = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16]]
    ref = [local.new_request(p, 64, request_id=f"r{i}") for i, p in enumerate(prompts)]
    mine = [local.new_request(p, 64, request_id=f"r{i}") for i, p in enumerate(prompts)]
    held = HeldStates()
    known: dict[str, tuple] = {}
    sent_whole = 0
    thresholds = [0.5, 0.9, 1.0]
    while not all(s.finished for s in ref):
        active = [i for i, s in enumerate(ref) if not s.finished]
        local.step([ref[i] for i in active], [thresholds[i] for i in active])
        batch = [mine[i] for i in active]
        new = [st.to_bytes() for st in batch if known.get(st.request_id) != sync_key(st)]
        sent_whole += len(new)
        held.adopt(pickle.loads(pickle.dumps(new)))
        reply = pickle.loads(
            pickle.dumps(held.step(remote, [s.request_id for s in batch], [thresholds[i] for i in active]))
        )
        assert not reply.errors and set(reply.outcome.tolist()) <= {RECOMPUTED, CACHED}
        after, diverged = adopt_reply(batch, reply)
        assert diverged == [] and all(a is not b and b.steps_done == a.steps_done - 1 for a, b in zip(after, batch))
        for i, st in zip(active, after):
            known[st.request_id] = sync_key(st)
            mine[i] = st
    for a, b in zip(ref, mine):
        assert np.array_equal(a.response, b.response) and a.steps_done == b.steps_done
        assert a.thresholds_used == b.thresholds_used and np.array_equal(a.conf_stats, b.conf_stats)
    # each state crossed once; finished requests are no longer held, nor cached
    assert sent_whole == len(prompts) and len(held) == 0 and not remote.cached_requests()


def test_a_request_not_held_is_refused_unchanged_and_a_bad_threshold_too(two_engines):
    _, remote = two_engines
    held = HeldStates()
    st = remote.new_request([5, 6, 7], 32, request_id="x")
    reply = held.step(remote, ["x"], [0.9])
    assert reply.outcome.tolist() == [UNCHANGED] and "not held" in reply.errors[0][1]
    held.adopt([st.to_bytes()])
    reply = held.step(remote, ["x"], [1.5])
    assert reply.outcome.tolist() == [UNCHANGED] and "outside (0, 1]" in reply.errors[0][1]
    after, diverged = adopt_reply([st], reply)
    assert after == [st] and st.steps_done == 0 and not diverged
    held.release(["x"])
    assert "x" not in held


def test_a_diverged_copy_is_reported(two_engines):
    _, remote = two_engines
    held = HeldStates()
    st = remote.new_request([5, 6, 7], 32, request_id="y")
    held.adopt([st.to_bytes()])
    reply = held.step(remote, ["y"], [0.9])
    st.steps_done += 3  # the driver's copy moved on some other way
    after, diverged = adopt_reply([st], reply)
    assert after[0].steps_done == 4
    assert diverged == ["y"]
    remote.release("y")


def ray_node(node_id, cpus, gpus=0, head=False, alive=True):
    res = {"CPU": cpus, **({"GPU": gpus} if gpus else {}), **({"node:__internal_head__": 1.0} if head else {})}
    return {"NodeID": node_id, "Alive": alive, "NodeManagerAddress": "10.0.0.1", "Resources": res}


def test_logical_nodes_bind_head_first_and_rebind_to_a_spare_when_theirs_leaves():
    nodes = [ray_node("b", 2), ray_node("a", 2, head=True)]
    m = NodeMap("cpu")
    assert m.resolve(1, nodes).node_id == "b" and m.bindings() == {0: "a", 1: "b"}
    assert m.resolve(2, nodes) is None  # two Ray nodes hold two logical ones
    nodes = [ray_node("b", 2, alive=False), ray_node("a", 2, head=True)]
    assert m.resolve(1, nodes) is None and m.resolve(0, nodes).node_id == "a"
    nodes.append(ray_node("c", 2))
    assert m.resolve(1, nodes).node_id == "c" and m.resolve(0, nodes).node_id == "a"


def test_a_ray_node_holds_as_many_logical_nodes_as_fit_in_it():
    nodes = [ray_node("big", 4, head=True), ray_node("small", 3)]
    m = NodeMap("cpu", per_node=2)
    assert [m.resolve(k, nodes).node_id for k in range(3)] == ["big", "big", "small"]
    assert m.resolve(3, nodes) is None  # 3 slots hold one logical node of 2
    assert m.bindings() == {0: "big", 1: "big", 2: "small"}
    with pytest.raises(ValueError, match="at least one"):
        NodeMap("cpu", per_node=0)


def test_gpu_clusters_count_gpus_and_skip_nodes_without_them():
    nodes = [ray_node("cpu-only", 16, head=True), ray_node("g", 16, gpus=8)]
    assert [(n.node_id, n.slots) for n in live_nodes("cuda", nodes)] == [("g", 8)]
    assert NodeMap("cuda").resolve(0, nodes).node_id == "g"
    with pytest.raises(ValueError, match="negative"):
        NodeMap("cpu").resolve(-1, nodes)
