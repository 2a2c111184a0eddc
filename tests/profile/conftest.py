import pytest

from tests.tiny_models import save_tiny_dila


@pytest.fixture(scope="session")
def random_checkpoint(tmp_path_factory):
    """A small randomly initialised embedded-architecture checkpoint (4 heads, so TP 1/2/4 divide)."""
    return save_tiny_dila(tmp_path_factory.mktemp("tp-dila"), seed=0, num_heads=4, max_position_embeddings=64)
