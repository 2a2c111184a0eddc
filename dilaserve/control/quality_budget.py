"""Which candidate thresholds an operator's quality budget allows.

The budget is a relative accuracy loss: with budget 0.1, a threshold is allowed when the
model's measured accuracy there is at least 90% of its best candidate's. The accuracies
come from the threshold-quality table the offline pipeline measures, so the same budget
allows 0.9 and 0.8 on a model whose accuracy falls fast and 0.9 down to 0.5 on one whose
accuracy barely moves (docs/architecture.md, "Quality-aware control").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def quality_allowed(
    thresholds: Sequence[float], accuracy: Mapping[float, float] | None, budget: float | None
) -> np.ndarray:
    """Boolean mask over ``thresholds``: those within ``budget`` of the best accuracy.

    No table or no budget allows every candidate. The most accurate candidate is always
    allowed, so the mask is never empty.
    """
    thr = [float(t) for t in thresholds]
    if accuracy is None or budget is None:
        return np.ones(len(thr), dtype=bool)
    missing = [t for t in thr if t not in accuracy]
    if missing:
        raise ValueError(
            f"the threshold-quality table has no accuracy for thresholds {missing}: rebuild it "
            "with these candidates (`make artifacts`) or drop them from the candidate thresholds"
        )
    acc = np.array([accuracy[t] for t in thr], dtype=np.float64)
    best = acc.max()
    return acc >= (1.0 - budget) * best - 1e-12
