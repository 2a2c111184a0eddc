"""Admission: take every request, or refuse early the ones that cannot meet their SLO."""

from __future__ import annotations

import math

from dilaserve.control.policies.base import Admission, Rejection, admission_policies


@admission_policies.register("all")
class AdmitAll(Admission):
    """Every request is taken (it waits for room if no instance has any)."""

    def check(self, predicted_s: float | None, slo_left: float, harmed: int = 0) -> Rejection | None:
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
    one second). A request that would wait for room is admitted: how long it waits is not
    predicted.
    """

    def check(self, predicted_s: float | None, slo_left: float, harmed: int = 0) -> Rejection | None:
        if predicted_s is None:
            return None
        if harmed > 1:
            return Rejection(
                f"joining would make {harmed} request(s) in flight miss their SLO under the current load",
                retry_after_s=float(max(1, math.ceil(predicted_s))),
            )
        if predicted_s <= slo_left:
            return None
        return Rejection(
            f"cannot meet its SLO under the current load: predicted {predicted_s:.2f} s at the lowest "
            f"allowed threshold, {max(slo_left, 0.0):.2f} s left",
            retry_after_s=float(max(1, math.ceil(predicted_s - max(slo_left, 0.0)))),
        )
