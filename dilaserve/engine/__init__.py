"""Per-instance denoising: request state, unmask rule, dual KV cache, batched steps."""

from .engine import DEFAULT_CHECKPOINT, DenoisingEngine, Generation, StepResult
from .state import RequestState, StepKind
from .unmask import select_commits

__all__ = [
    "DenoisingEngine",
    "Generation",
    "StepResult",
    "RequestState",
    "StepKind",
    "select_commits",
    "DEFAULT_CHECKPOINT",
]
