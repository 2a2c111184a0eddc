import pytest

from dilaserve.engine import DenoisingEngine
from dilaserve.predict.prompts import synthetic_prompts
from dilaserve.predict.rollouts import fixed_threshold_jobs, run_rollouts


@pytest.fixture(scope="session")
def rollout():
    """A small real rollout set: 24 prompts at two thresholds on the default checkpoint."""
    engine = DenoisingEngine.from_pretrained()
    return run_rollouts(engine, fixed_threshold_jobs(synthetic_prompts(24, seed=5), [0.5, 0.9]), batch_size=32)


@pytest.fixture(scope="session")
def step_table(rollout):
    return rollout.steps
