"""Loopback networking helpers shared by the server launcher, the TP process groups and tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now (others may take it later:
    bind soon after asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bound_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0: one the kernel picks), for uvicorn's
    ``Server.run(sockets=...)``.

    Bind before Ray starts: Ray's processes take ephemeral ports of their own, so a port that was
    free when chosen may be Ray's by the time the HTTP server binds it. Raises ``OSError`` with
    the address and what to do when the port is taken.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    # As uvicorn binds: a restarted server may reuse a port whose old connections linger.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise OSError(
            e.errno, f"cannot listen on {host}:{port}: {e.strerror}; stop what holds it or pick another --port"
        ) from e
    return sock
