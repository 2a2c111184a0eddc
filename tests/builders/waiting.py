"""Waiting on a condition instead of sleeping a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(fn: Callable[[], object], timeout_s: float = 120, every: float = 0.05) -> bool:
    """Poll ``fn`` every ``every`` seconds until it is truthy (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(every)
    return False
