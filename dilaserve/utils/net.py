"""Loopback networking helpers shared by the server launcher, the TP process groups and tests."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now (others may take it later:
    bind soon after asking)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
