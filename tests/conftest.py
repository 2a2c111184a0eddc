"""Shared fixtures: a tiny random model built by the tests, and the embedded default."""

from __future__ import annotations

import pytest

from dilaserve.engine import DEFAULT_CHECKPOINT, DenoisingEngine
from dilaserve.model.adapters import load_diffusion_lm
from tests.tiny_models import save_tiny_dila


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
