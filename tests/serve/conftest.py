import pytest

from tests.serve.server import LiveServer


@pytest.fixture(scope="session")
def ray_cluster():
    """One small local Ray cluster for the whole test session, on loopback as the server's own."""
    import ray

    from dilaserve.cluster import ray_local

    ray_local.connect(None, 2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def server(ray_cluster):
    """The default server: two TP-1 CPU instances of the embedded model, policy dilaserve."""
    s = LiveServer(reconfig_interval_s=0, default_slo_ms=60000).start()
    yield s
    s.stop()
