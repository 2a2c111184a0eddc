"""What ``/health`` answers: ready, degraded or unavailable, and why.

The server is *unavailable* (HTTP 503) while it cannot take a request at all (starting up,
shutting down, no ready instance). Beyond that, readiness watches the step loop: requests
that wait while no step finishes mean the engine core is held up (a long control job on
its thread, a hung instance). After ``--stall-degraded-s`` the answer is *degraded* (still
200: the server takes requests, but they will be late; the reason says how late), and after
``--stall-unavailable-s`` it is 503, so that a load balancer sends traffic elsewhere.

The stall is measured from the later of the last finished step and the moment requests
began to wait: a server idle for an hour is not stalled a moment after a request arrives.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import ServeConfig


@dataclass(frozen=True)
class Health:
    """A ``/health`` verdict."""

    status: str  # ok | degraded | unavailable
    reason: str | None = None

    @property
    def http_status(self) -> int:
        return 503 if self.status == "unavailable" else 200


def stalled_for(now: float, waiting: int, busy_since: float | None, last_step_at: float | None) -> float:
    """Seconds the step loop has gone without finishing a step while ``waiting`` requests wait
    (0 when none does): since the last step, or since they began waiting if that is later."""
    if waiting == 0 or busy_since is None:
        return 0.0
    since = busy_since if last_step_at is None else max(busy_since, last_step_at)
    return max(0.0, now - since)


def judge(not_ready: str | None, waiting: int, stalled_s: float, cfg: ServeConfig) -> Health:
    """The verdict from why the server cannot serve (None when it can), the requests in flight
    and how long the step loop has stalled (:func:`stalled_for`)."""
    if not_ready is not None:
        return Health("unavailable", not_ready)
    if stalled_s < cfg.stall_degraded_s:
        return Health("ok")
    reason = f"no step has finished for {stalled_s:.1f} s while {waiting} request(s) wait"
    if stalled_s >= cfg.stall_unavailable_s:
        return Health("unavailable", f"{reason} (over --stall-unavailable-s {cfg.stall_unavailable_s:g})")
    return Health("degraded", f"{reason} (over --stall-degraded-s {cfg.stall_degraded_s:g}); answers will be late")
