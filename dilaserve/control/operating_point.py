"""Operating points: which thresholds new arrivals may use, per priority tier.

A static server runs one threshold (or one per SLO tier) for the whole run; DiLaServe's
default walks every allowed threshold per request. Both are operating points of the same
controller: a tier pinned to ``tau`` admits and runs its arrivals at ``tau`` alone (admission
judges them there, selection has nothing else to pick), and an adaptive tier keeps the
policy's full allowed set. The operating-point tuner (docs/architecture.md, "Operating
points") moves between them online; the static frontier runs them fixed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

#: A tier's entry meaning "every threshold the policy allows" (per-request adaptive choice).
ADAPTIVE = None


@dataclass(frozen=True)
class OperatingPoint:
    """The threshold each priority tier's new arrivals are pinned to, or none.

    Attributes:
        pins: ``(priority, threshold)`` pairs, sorted by priority; a tier that is absent
            (or pinned to ``None``) is adaptive. Use :meth:`static` and :meth:`per_tier`.
        default: the pin of every priority not listed (``None``: adaptive).
        fit: place arrivals by slack (best fit: the busiest instance each still fits with
            headroom) rather than on the instance with the lowest step latency; honoured by
            a slack-aware dispatch (docs/architecture.md, "Slack-aware placement").
        admit: SLO-aware admission refuses arrivals it predicts late (where the policy has
            admission). Off, every arrival is taken and waits for room: at low load a
            refusal on a pessimistic prediction costs a request that would have made it
            (docs/architecture.md, "Operating points").
    """

    pins: tuple[tuple[int, float | None], ...] = ()
    default: float | None = ADAPTIVE
    fit: bool = False
    admit: bool = True

    def __post_init__(self) -> None:
        pins = tuple(sorted((int(p), None if t is None else float(t)) for p, t in self.pins))
        if len({p for p, _ in pins}) != len(pins):
            raise ValueError(f"OperatingPoint pins {pins} name a priority twice: give each tier one threshold")
        object.__setattr__(self, "pins", pins)
        if self.default is not None:
            object.__setattr__(self, "default", float(self.default))

    @classmethod
    def adaptive(cls) -> OperatingPoint:
        return cls()

    @classmethod
    def static(cls, threshold: float) -> OperatingPoint:
        """Every tier at ``threshold``."""
        return cls(default=threshold)

    @classmethod
    def per_tier(cls, pins: Mapping[int, float | None] | Iterable[tuple[int, float | None]]) -> OperatingPoint:
        items = pins.items() if isinstance(pins, Mapping) else pins
        return cls(tuple(items))

    def pin(self, priority: int) -> float | None:
        """The threshold of ``priority``'s arrivals, or None where they are adaptive."""
        for p, t in self.pins:
            if p == priority:
                return t
        return self.default

    def with_pin(self, priority: int, threshold: float | None) -> OperatingPoint:
        """This point with one tier changed."""
        rest = [(p, t) for p, t in self.pins if p != priority]
        return replace(self, pins=(*rest, (priority, threshold)))

    def with_fit(self, fit: bool) -> OperatingPoint:
        """This point with slack-aware placement switched on or off."""
        return replace(self, fit=fit)

    def with_admit(self, admit: bool) -> OperatingPoint:
        """This point with SLO-aware admission switched on or off."""
        return replace(self, admit=admit)

    @property
    def is_adaptive(self) -> bool:
        return self.default is None and all(t is None for _, t in self.pins)

    @property
    def label(self) -> str:
        """``adaptive``, ``static@0.8``, or ``tiers(2:0.7,1:adaptive,0:0.9)`` (highest priority
        first), with ``+fit`` where arrivals are placed by slack and ``+take-all`` where
        admission is off."""
        return self._threshold_label + ("+fit" if self.fit else "") + ("" if self.admit else "+take-all")

    @property
    def _threshold_label(self) -> str:
        if not self.pins:
            return "adaptive" if self.default is None else f"static@{self.default}"
        parts = [f"{p}:{'adaptive' if t is None else t}" for p, t in reversed(self.pins)]
        if self.default is not None:
            parts.append(f"*:{self.default}")
        return f"tiers({','.join(parts)})"

    @classmethod
    def from_label(cls, text: str) -> OperatingPoint:
        """The point :attr:`label` names (``adaptive``, ``static@0.8``,
        ``tiers(2:0.7,1:adaptive,*:0.9)``, each with ``+fit`` and ``+take-all`` as it prints
        them), so a point a run reported can be run again by name."""
        body, *flags = text.strip().split("+")
        unknown = set(flags) - {"fit", "take-all"}
        if unknown:
            raise ValueError(f"operating point {text!r}: unknown suffix {sorted(unknown)} (use +fit, +take-all)")
        extra = {"fit": "fit" in flags, "admit": "take-all" not in flags}
        if body == "adaptive":
            return cls(**extra)
        if body.startswith("static@"):
            return cls(default=_threshold(body[len("static@") :], text), **extra)
        if not (body.startswith("tiers(") and body.endswith(")")):
            raise ValueError(
                f"operating point {text!r}: write adaptive, static@TAU or tiers(PRIORITY:TAU,...,*:TAU), "
                "e.g. tiers(2:0.7,*:0.9)"
            )
        pins, default = [], ADAPTIVE
        for part in filter(None, body[len("tiers(") : -1].split(",")):
            key, _, value = part.partition(":")
            t = None if value == "adaptive" else _threshold(value, text)
            if key == "*":
                default = t
            elif key.isdigit():
                pins.append((int(key), t))
            else:
                raise ValueError(f"operating point {text!r}: {part!r} is not PRIORITY:TAU or *:TAU")
        return cls(tuple(pins), default, **extra)


def _threshold(value: str, text: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"operating point {text!r}: {value!r} is not a threshold (a number like 0.8)") from None
