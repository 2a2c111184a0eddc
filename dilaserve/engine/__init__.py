"""Per-instance denoising: request state, unmask rule, dual KV cache, batched steps.

The request state, the unmask rule and the default checkpoint's path import only numpy;
the engine itself (torch, transformers) is imported on first use, so a command line that
only parses its flags, or a control-plane module that only needs :class:`StepKind`,
starts in a fraction of a second.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .defaults import DEFAULT_CHECKPOINT
from .state import RequestState, StepKind
from .unmask import select_commits

if TYPE_CHECKING:
    from .engine import DecodeResult, DenoisingEngine, StepResult

#: Names served by :mod:`dilaserve.engine.engine`, imported when first asked for.
_LAZY = ("DenoisingEngine", "DecodeResult", "StepResult")

__all__ = [
    "DenoisingEngine",
    "DecodeResult",
    "StepResult",
    "RequestState",
    "StepKind",
    "select_commits",
    "DEFAULT_CHECKPOINT",
]


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(".engine", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
