"""Model mode (the embedded DLM decodes every step) and replay mode (outcomes drawn from
that model's recorded dynamics) agree on step counts for the same workload."""

import numpy as np
import pytest

from dilaserve.engine import DenoisingEngine
from dilaserve.predict.dynamics import StepDynamics
from dilaserve.predict.prompts import synthetic_prompts
from dilaserve.predict.replay import ReplayTable
from dilaserve.predict.rollouts import fixed_threshold_jobs, run_rollouts
from dilaserve.reconfig.config import ClusterConfig
from dilaserve.sim.arrivals import prompt_workload
from dilaserve.sim.backend import SimBackendConfig
from dilaserve.sim.progress import ModelProgress, ReplayProgress
from dilaserve.sim.setting import ClusterSetting, with_dynamics
from dilaserve.sim.simulator import SimConfig, Simulator
from tests.sim.builders import linear_profile, quality


@pytest.fixture(scope="module")
def engine_and_table():
    engine = DenoisingEngine.from_pretrained()
    rollout = run_rollouts(engine, fixed_threshold_jobs(synthetic_prompts(24, seed=5), [0.5, 0.9]), batch_size=48)
    return engine, StepDynamics.from_step_table(rollout.steps)


def test_model_and_replay_agree_on_steps(engine_and_table):
    engine, dyn = engine_and_table
    table = ReplayTable(dyn)
    setting = with_dynamics(
        ClusterSetting("cpu", linear_profile({1: 1e-4}), ClusterConfig(nodes=1, gpus_per_node=2, tp_degrees=(1,))), dyn
    )
    prompts = synthetic_prompts(24, seed=11)
    wl = prompt_workload(prompts, rate=20.0, count_tokens=lambda text: len(engine.encode(text)), seed=0)
    cfg = SimConfig(backend=SimBackendConfig(latency_noise=0.0))
    model = Simulator(setting, ModelProgress(engine, table), config=cfg).run("infaas", wl, slo_s=5.0)
    replay = Simulator(setting, ReplayProgress(table, quality()), config=cfg).run("infaas", wl, slo_s=5.0)
    m, r = model.requests["steps"].to_numpy(), replay.requests["steps"].to_numpy()
    assert (model.requests["status"] == "finished").all() and (replay.requests["status"] == "finished").all()
    # Replayed requests decode every block of their canvas; the model may stop at an early
    # end-of-answer, so replay may run slightly longer, never much.
    assert r.mean() == pytest.approx(m.mean(), rel=0.25)
    # Replay draws each step from the whole population of recorded steps, so single requests
    # differ: under the model a request's steps follow its task as much as its length (a
    # free-order `list` of one block can take more steps than an ordered `arith` of four).
    # On average, longer canvases take more steps in both modes.
    out = model.requests["output_tokens"].to_numpy()
    assert (out == replay.requests["output_tokens"].to_numpy()).all()
    longest, shortest = out == out.max(), out == out.min()
    for steps in (m, r):
        assert steps[longest].mean() > 1.2 * steps[shortest].mean()
    # Model mode grades real answers: quality is a share of correct answers.
    q = model.requests["quality"].to_numpy()
    assert set(np.unique(q)) <= {0.0, 1.0}
    assert model.quality_estimator.startswith("model:")
