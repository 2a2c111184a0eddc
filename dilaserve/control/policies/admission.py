"""Admission: take every request, or refuse early the ones that cannot meet their SLO."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from dilaserve.control.policies.base import Admission, Rejection, admission_policies
from dilaserve.control.request import TrackedRequest


@admission_policies.register("all")
class AdmitAll(Admission):
    """Every request is taken (it waits for room if no instance has any)."""

    def check(
        self, predicted_s: float | None, slo_left: float, harmed: int = 0, wait_s: float = 0.0
    ) -> Rejection | None:
        return None


@admission_policies.register("slo")
class SloAdmission(Admission):
    """Refuse a request whose predicted latency, at its lowest allowed threshold on the
    instance it would join, exceeds its SLO time left, or whose joining would push two or
    more requests already there out of their headroom (``ControlConfig.admission_headroom``).

    The first would miss its SLO anyway, and while it ran it would slow every request it
    shares a batch with. The second would buy its own hit with more than one miss: with one
    request harmed, admitting is a wash and the newcomer is taken. Refused at once, the
    client can retry elsewhere or later (``retry_after_s``: the predicted excess, at least
    one second). A request that would wait for room is predicted with its wait
    (:func:`queued_finish_s`, ``wait_s`` of ``predicted_s``): taking it only to let it wait
    past its SLO would promise what the queue cannot keep.
    """

    def check(
        self, predicted_s: float | None, slo_left: float, harmed: int = 0, wait_s: float = 0.0
    ) -> Rejection | None:
        if predicted_s is None:
            return None
        if harmed > 1:
            return Rejection(
                f"joining would make {harmed} request(s) in flight miss their SLO under the current load",
                retry_after_s=float(max(1, math.ceil(predicted_s))),
            )
        if predicted_s <= slo_left:
            return None
        queued = f" ({wait_s:.2f} s of it waiting for room behind the queue)" if wait_s > 0 else ""
        return Rejection(
            f"cannot meet its SLO under the current load: predicted {predicted_s:.2f} s at the lowest "
            f"allowed threshold{queued}, {max(slo_left, 0.0):.2f} s left",
            retry_after_s=float(max(1, math.ceil(predicted_s - max(slo_left, 0.0)))),
        )


@dataclass(frozen=True)
class WaitingRoom:
    """An instance a request may wait for: ``step_s``, the seconds of one of its steps with
    a full batch (on the calibrated profile), and ``member_steps``, its members' predicted
    steps left, each member holding a place in the batch until it finishes."""

    step_s: float
    member_steps: tuple[float, ...]


def queued_finish_s(
    rooms: Sequence[WaitingRoom], ahead_steps: Sequence[float], own_steps: float
) -> tuple[float, float] | None:
    """``(finish, wait)`` seconds from now of a request that must wait for room: the places
    of the ``rooms``' members free up as they finish; the requests ahead of it in the queue
    (``ahead_steps``, in the order room is handed out) take the first ones, and it takes
    the next and runs its ``own_steps`` there. None when it has no room to wait for.

    Each place's successor runs at the room's full-batch step time: the queue drains as
    fast as full batches step, neither faster (a request joining an emptier batch) nor
    slower (threshold lowering is not assumed for those ahead beyond their lowest allowed
    threshold, which their predicted steps are taken at)."""
    free = [(room.step_s * s, i) for i, room in enumerate(rooms) for s in room.member_steps]
    free += [(0.0, i) for i, room in enumerate(rooms) if not room.member_steps]
    if not free:
        return None
    heapq.heapify(free)
    for steps in ahead_steps:
        t, i = free[0]
        heapq.heapreplace(free, (t + rooms[i].step_s * steps, i))
    wait, i = free[0]
    return wait + rooms[i].step_s * own_steps, wait


@dataclass(frozen=True)
class QueueAhead:
    """What an arrival that finds no room would wait behind (built by the scheduler, priced
    by the controller): per instance it may go to, ``(tp, tokens, requests)`` of its batch
    and its members; and the waiting requests ahead of it, in the order room is handed out."""

    rooms: tuple[tuple[tuple[int, float, int], tuple[TrackedRequest, ...]], ...]
    ahead: tuple[TrackedRequest, ...]
