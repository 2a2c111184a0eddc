"""Shared fixtures: one torch thread for the session, a tiny random model built by the tests,
and the embedded default."""

from __future__ import annotations

import pytest
import torch

from dilaserve.engine import DEFAULT_CHECKPOINT, DenoisingEngine
from dilaserve.model.adapters import load_diffusion_lm
from tests.tiny_models import save_tiny_dila


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Every test's torch work on one thread. The models here are tiny, so a second thread
    buys nothing, and on a busy 2-core machine two torch threads fight for the cores: with
    one other process spinning, tests/bench/test_engine_bench.py took 23 s on two threads and
    0.5 s on one. Code that sizes its own pool (the profiler's ranks) restores this one."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A randomly initialised embedded-architecture checkpoint saved to a temp folder."""
    return save_tiny_dila(tmp_path_factory.mktemp("tiny-dila"), seed=0)


#: Block length of :func:`tiny_bd_checkpoint`: short, so a request crosses several blocks.
TINY_BD_BLOCK = 8


@pytest.fixture(scope="session")
def tiny_bd_checkpoint(tmp_path_factory):
    """A randomly initialised block-causal (block-diffusion) checkpoint with 8-token blocks."""
    return save_tiny_dila(
        tmp_path_factory.mktemp("tiny-dila-bd"), seed=1, block_causal=True, block_length=TINY_BD_BLOCK
    )


@pytest.fixture(scope="session")
def tiny_engine(tiny_checkpoint):
    return DenoisingEngine(load_diffusion_lm(tiny_checkpoint))


@pytest.fixture(scope="session")
def default_engine():
    """The committed default checkpoint (trained, so its predictions are decisive)."""
    return DenoisingEngine.from_pretrained(DEFAULT_CHECKPOINT)


#: Fixtures that start Ray (and with it the servers built on it): a test using one is an
#: integration test, whatever module it sits in.
INTEGRATION_FIXTURES = frozenset({"ray_cluster"})


def pytest_collection_modifyitems(items):
    for item in items:
        if INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
