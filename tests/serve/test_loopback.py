"""The default server listens on loopback only: its HTTP port and every port of the Ray
cluster it starts (GCS, raylet, object manager, agents, workers)."""

import ipaddress

import psutil
import pytest

from dilaserve.cluster.ray_local import is_loopback
from dilaserve.serve.launcher import start_server

pytestmark = pytest.mark.timeout(600)


def listening(pids: set[int]) -> list[tuple[int, str, int]]:
    return [
        (c.pid, c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.pid in pids
    ]


@pytest.mark.integration  # starts the default server and its Ray cluster
def test_no_listening_socket_of_the_default_server_is_outside_loopback():
    server = start_server(timeout_s=300)
    try:
        root = psutil.Process(server.pid)
        tree = {root.pid} | {p.pid for p in root.children(recursive=True)}
        sockets = listening(tree)
        names = {pid: psutil.Process(pid).name() for pid, _, _ in sockets}
    finally:
        server.stop()
    # The HTTP port and Ray's GCS and raylet at least: the check is not vacuous.
    assert any(port == server.port for _, _, port in sockets)
    assert len({pid for pid, _, _ in sockets}) >= 3, sockets
    outside = [(names[pid], ip, port) for pid, ip, port in sockets if not is_loopback(ip)]
    assert not outside, f"listening beyond 127.0.0.0/8: {outside}"


@pytest.mark.parametrize(
    "host,loopback",
    [("127.0.0.1", True), ("127.5.0.1", True), ("::ffff:127.0.0.1", True), ("localhost", True), ("::1", True)]
    + [("0.0.0.0", False), ("::", False), ("192.0.2.2", False), ("::ffff:10.0.0.1", False), ("example", False)],
)
def test_loopback_addresses(host, loopback):
    assert is_loopback(host) is loopback
    if loopback and host != "localhost":
        assert ipaddress.ip_address(host).version in (4, 6)
