"""How a simulated step advances its requests: replayed outcomes or the real model.

Both progress models advance requests through ``RequestState.apply_step`` (the replay model
directly, the model through ``DenoisingEngine.step``), so progress features, block
advance and step kinds follow the same bookkeeping as in serving.

* :class:`ReplayProgress` draws each step's outcome (tokens committed, confidence
  statistics) from the recorded step dynamics at the threshold the controller chose, and
  estimates quality from the measured threshold-quality table.
* :class:`ModelProgress` runs the embedded model and grades the answers for real.
"""

from __future__ import annotations

import abc
import random
import zlib
from collections.abc import Sequence

import numpy as np

from dilaserve.cluster.base import StepAssignment
from dilaserve.engine.state import RequestState
from dilaserve.predict.quality import ThresholdQuality
from dilaserve.predict.replay import ReplayTable
from dilaserve.sim.workload import WorkloadRequest

#: Token ids of replayed canvases: committed positions hold FILL (never mask, never EOS),
#: so a replayed request decodes every block of its canvas.
MASK_ID, EOS_ID, FILL_ID = 1, 2, 3
_PROMPT_IDS = np.zeros(1 << 16, dtype=np.int64)  # shared read-only prompt ids (replay only)


def canvas_length(output_tokens: int, block_length: int) -> int:
    """The canvas a DLM decodes for an answer of ``output_tokens``: whole blocks."""
    return block_length * max(1, -(-int(output_tokens) // block_length))


class ProgressModel(abc.ABC):
    name: str
    #: How per-request quality is obtained (reported next to the quality numbers).
    quality_estimator: str

    def __init__(self, table: ReplayTable):
        #: The step law both modes share for expectations (oracle truth, isolated latency).
        self.table = table

    @abc.abstractmethod
    def new_state(self, req: WorkloadRequest, block_length: int) -> RequestState: ...

    @abc.abstractmethod
    def step(self, batch: Sequence[StepAssignment]) -> None:
        """Advance every request of ``batch`` by one step at its threshold (in place)."""

    @abc.abstractmethod
    def quality(self, req: WorkloadRequest, state: RequestState) -> float:
        """Quality of a finished request, in [0, 1]."""

    def release(self, state: RequestState) -> None:
        """Forget a finished request."""

    def expected_remaining(self, state: RequestState, threshold: float) -> float:
        return self.table.expected_remaining(state, threshold)


class ReplayProgress(ProgressModel):
    name = "replay"
    quality_estimator = (
        "replay: per request, the mean of the measured fixed-threshold accuracies at "
        "the thresholds its steps used, later steps weighing more when they varied (fitted on rollouts)"
    )

    def __init__(self, table: ReplayTable, quality: ThresholdQuality, seed: int = 0, block_causal: bool = False):
        super().__init__(table)
        self.quality_table = quality
        self.seed = seed
        #: Replay block-diffusion requests (one prefill, an exact cache kept across blocks);
        #: their step kinds follow ``RequestState.next_kind`` as in the engine.
        self.block_causal = block_causal
        self._rngs: dict[str, random.Random] = {}
        self._fill = np.full(1024, FILL_ID, dtype=np.int64)

    def new_state(self, req: WorkloadRequest, block_length: int) -> RequestState:
        if req.prompt_tokens > len(_PROMPT_IDS):
            raise ValueError(
                f"request {req.request_id}: {req.prompt_tokens} prompt tokens exceed the "
                f"replay limit of {len(_PROMPT_IDS)}"
            )
        # One RNG per request, seeded by its id: a request draws the same outcomes under
        # every policy that steps it at the same thresholds (common random numbers).
        self._rngs[req.request_id] = random.Random(zlib.crc32(req.request_id.encode()) ^ self.seed)
        return RequestState(
            req.request_id,
            _PROMPT_IDS[: req.prompt_tokens],
            canvas_length(req.output_tokens, block_length),
            block_length,
            MASK_ID,
            EOS_ID,
            use_cache=True,
            block_causal=self.block_causal,
        )

    def step(self, batch: Sequence[StepAssignment]) -> None:
        draw, rngs = self.table.draw, self._rngs
        for a in batch:
            st = a.state
            bl = st.block_length
            u = st.unmasked_in_block
            k, conf = draw(a.threshold, u, bl, rngs[st.request_id])
            k = min(k, bl - u)
            # Commit the leftmost masked positions: which positions a step fills does not
            # change any progress feature, only how many.
            start = st.block_start + u
            st.apply_step(np.arange(start, start + k), self._fill[:k], a.threshold, st.next_kind, conf)

    def quality(self, req: WorkloadRequest, state: RequestState) -> float:
        return self.quality_table.estimate(state.thresholds_used)

    def release(self, state: RequestState) -> None:
        self._rngs.pop(state.request_id, None)


class ModelProgress(ProgressModel):
    name = "model"
    quality_estimator = "model: every answer decoded by the embedded model and graded by its task's grader"

    def __init__(self, engine, table: ReplayTable):
        super().__init__(table)
        self.engine = engine

    def new_state(self, req: WorkloadRequest, block_length: int) -> RequestState:
        if req.prompt is None:
            raise ValueError(
                f"request {req.request_id} has no prompt: model mode needs a prompt workload "
                "(see dilaserve.sim.arrivals.prompt_workload)"
            )
        return self.engine.new_request(
            req.prompt.text, req.prompt.gen_length, block_length, use_cache=True, request_id=req.request_id
        )

    def step(self, batch: Sequence[StepAssignment]) -> None:
        results = self.engine.step([a.state for a in batch], [a.threshold for a in batch])
        errors = [r.error for r in results if r.error]
        if errors:
            raise RuntimeError(f"model step failed: {errors[0]}")

    def quality(self, req: WorkloadRequest, state: RequestState) -> float:
        return float(req.prompt.grade(self.engine.decode(state)))

    def release(self, state: RequestState) -> None:
        self.engine.release(state.request_id)
