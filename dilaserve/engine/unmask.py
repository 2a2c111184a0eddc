"""The unmask rule (docs/architecture.md section 3).

Among the still-masked positions of the current block, commit every token
whose top-1 probability is at least the threshold; if none is, commit the
single most confident one, so every step makes progress.
"""

from __future__ import annotations

import numpy as np


def select_commits(confidence: np.ndarray, masked: np.ndarray, threshold: float) -> np.ndarray:
    """Indices (into the block) to commit this step.

    ``threshold`` may be ``inf`` for a one-token-per-step decode.
    """
    cand = np.flatnonzero(masked)
    if cand.size == 0:
        return cand
    sure = cand[confidence[cand] >= threshold]
    if sure.size:
        return sure
    return cand[[int(np.argmax(confidence[cand]))]]
