"""What one step over a batch runs: the tokens of its recompute pass and of its cache pass.

Recompute requests run together over what their pass runs (the whole canvas, or a
block-causal prefill's context) and cache requests together over their blocks (a
block-causal append feeding one block more); a batch with both runs both passes. The
simulated instances price a step by it, and the control plane's step-time calibration
compares a real step's time with the profile's for the same passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from dilaserve.cluster.base import StepAssignment


def batch_pass_tokens(batch: Sequence[StepAssignment]) -> tuple[int, int]:
    """``(recompute tokens, cache tokens)`` of one step over ``batch``."""
    rec = cac = 0
    for a in batch:
        st = a.state
        if st.use_cache and st.block_cached:
            cac += st.block_length * (2 if st.append_pending else 1)
        else:
            rec += st.context_tokens
    return rec, cac
