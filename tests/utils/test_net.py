"""Loopback helpers: a bound socket holds its port, and a taken port is a clear error."""

import errno
import socket

import pytest

from dilaserve.utils.net import bound_socket


def test_a_bound_socket_holds_its_port_until_closed():
    sock = bound_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    assert port > 0
    sock.listen()
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # the port answers: it was bound where asked
    sock.close()
    bound_socket("127.0.0.1", port).close()  # free again once closed


def test_a_taken_port_names_the_address_and_what_to_do():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(OSError) as err:
            bound_socket("127.0.0.1", port)
    assert err.value.errno == errno.EADDRINUSE
    assert f"127.0.0.1:{port}" in str(err.value) and "--port" in str(err.value)
