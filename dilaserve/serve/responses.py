"""The client's side of a request: its handle, and the engine core's outputs turned into
streamed text and a final result.

:class:`ResponseRouter` runs on the HTTP loop. The core's outputs come to it in batches:
each step's states (to stream committed blocks), each admission, and each request's outcome
(to resolve it, or to fail it with the error the API reports).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

import numpy as np

from dilaserve.engine.state import RequestState

from .engine_core import Admitted, EngineCore, EngineOutput, FinalOutput, StepOutput
from .errors import BadRequest, Overloaded, Unavailable
from .metrics import ServeMetrics


@dataclass
class CompletionResult:
    """A finished request, as the API reports it."""

    request_id: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    steps: int
    thresholds: list[float]
    latency_s: float
    slo_s: float
    slo_met: bool
    instances: list[str]
    finish_reason: str


@dataclass(eq=False)
class RequestHandle:
    """The client's side of one request: a stream of committed text and a final result."""

    request_id: str
    prompt_tokens: int
    slo_s: float
    arrival: float
    chunks: asyncio.Queue = field(default_factory=asyncio.Queue)
    admitted: asyncio.Future | None = None
    done: asyncio.Future | None = None
    last_state: RequestState | None = None
    streamed_to: int = 0  # response positions already streamed
    instances: list[str] = field(default_factory=list)
    slo_field: str = "slo_ms"
    stops: tuple[str, ...] = ()
    emitted: str = ""  # answer text already queued to the client


class ResponseRouter:
    """Routes the core's outputs to the open ``handles`` (shared with the runtime, which
    adds them); a resolved or failed request leaves ``handles``."""

    def __init__(self, handles: dict[str, RequestHandle], metrics: ServeMetrics, tokenizer, core: EngineCore):
        self.handles = handles
        self.metrics = metrics
        self.tokenizer = tokenizer
        self.core = core

    def on_outputs(self, outputs: list[EngineOutput]) -> None:
        for out in outputs:
            if isinstance(out, StepOutput):
                self._on_step(out)
            elif isinstance(out, Admitted):
                h = self.handles.get(out.request_id)
                if h is not None and not h.admitted.done():
                    h.admitted.set_result(True)
                    self.metrics.prompt_tokens.inc(h.prompt_tokens)
                    self.metrics.prompt_length.observe(h.prompt_tokens)
            elif isinstance(out, FinalOutput):
                self._on_outcome(out)

    def fail(self, h: RequestHandle, err: Exception) -> None:
        """End ``h`` with ``err``: before admission the submit raises it, after it the
        response (or stream) reports it."""
        h.chunks.put_nowait(None)
        if not h.admitted.done():
            h.admitted.set_exception(err)
            h.done.cancel()
        elif not h.done.done():
            h.done.set_exception(err)

    def _on_step(self, out: StepOutput) -> None:
        h = self.handles.get(out.request_id)
        if h is None:
            return
        st = out.state
        if h.last_state is None:
            self.metrics.queue_time.observe(max(0.0, self.core.backend.clock() - h.arrival))
        h.last_state = st
        if not h.instances or h.instances[-1] != out.instance_id:
            h.instances.append(out.instance_id)
        if st.thresholds_used:
            self.metrics.threshold.observe(st.thresholds_used[-1])
        self._stream(h, st)

    def _answer_text(self, h: RequestHandle, st: RequestState, upto: int) -> tuple[str, bool]:
        """The text of the answer's first ``upto`` positions (up to its EOS), cut before the
        first stop string; True when a stop string cut it."""
        ids = st.response[:upto]
        eos = np.flatnonzero(ids == st.eos_id)
        if eos.size:
            ids = ids[: eos[0]]
        text = self.tokenizer.decode(ids.tolist(), skip_special_tokens=True)
        cuts = [i for i in (text.find(s) for s in h.stops) if i >= 0]
        return (text[: min(cuts)], True) if cuts else (text, False)

    def _stream(self, h: RequestHandle, st: RequestState) -> None:
        """Queue the text of every block that is now fully committed; finish the request at
        once when that text reaches a stop string."""
        masked = np.flatnonzero(st.response == st.mask_id)
        final = st.finished or masked.size == 0
        upto = st.gen_length if final else int(masked[0]) // st.block_length * st.block_length
        upto = min(upto, st.answer_limit)  # never past max_tokens
        if upto <= h.streamed_to:
            return
        h.streamed_to = upto
        text, stopped = self._answer_text(h, st, upto)
        # Hold back a tail that may be the start of a stop string the next block completes.
        hold = 0 if final or stopped or not h.stops else max(len(s) for s in h.stops) - 1
        visible = text[: max(len(h.emitted), len(text) - hold)]
        self._emit_text(h, visible)
        if stopped and not final:
            # The answer ends here: free the request's slot and answer now.
            self.handles.pop(h.request_id, None)
            self.core.abort(h.request_id, "stop string")
            self._resolve(h, st, text, "stop", self.core.backend.clock() - h.arrival)

    def _emit_text(self, h: RequestHandle, text: str) -> None:
        """Queue what ``text`` (the answer so far) adds to what the client has; the first
        text of a request is its time to first token."""
        if not (len(text) > len(h.emitted) and text.startswith(h.emitted)):
            return
        if not h.emitted:
            self.metrics.ttft.observe(max(0.0, self.core.backend.clock() - h.arrival))
        h.chunks.put_nowait(text[len(h.emitted) :])
        h.emitted = text

    def _resolve(
        self,
        h: RequestHandle,
        st: RequestState,
        text: str,
        finish_reason: str,
        latency_s: float,
        met: bool | None = None,
    ) -> None:
        """Answer ``h`` with ``text``: counted, streamed to its end, its future set."""
        answer = st.answer_ids()
        tokens = int(answer.size)
        if text != self.tokenizer.decode(answer.tolist(), skip_special_tokens=True):
            tokens = len(self.tokenizer(text, add_special_tokens=False)["input_ids"])  # cut by a stop string
        met = latency_s <= h.slo_s if met is None else met
        gen = CompletionResult(
            request_id=h.request_id,
            text=text,
            prompt_tokens=h.prompt_tokens,
            completion_tokens=tokens,
            steps=st.steps_done,
            thresholds=[round(t, 4) for t in st.thresholds_used],
            latency_s=latency_s,
            slo_s=h.slo_s,
            slo_met=met,
            instances=list(h.instances),
            finish_reason=finish_reason,
        )
        self.metrics.record_finish(met, st.steps_done, latency_s, tokens)
        h.chunks.put_nowait(None)
        h.done.set_result(gen)

    def _on_outcome(self, final: FinalOutput) -> None:
        out = final.outcome
        h = self.handles.pop(out.request_id, None)
        if h is None:
            return
        if out.status == "finished":
            st = h.last_state
            text, stopped = self._answer_text(h, st, st.answer_limit)
            self._emit_text(h, text)  # the tail held back for the stop strings, if any
            self._resolve(h, st, text, "stop" if stopped else st.finish_reason, out.latency, out.met_slo)
            return
        self.metrics.requests.labels(out.status).inc()
        if out.status == "rejected" and out.retry_after_s is not None:
            err = self._refusal(h, final)
        elif out.status == "rejected":
            err = BadRequest(f"request rejected: {out.reason}")
        else:
            err = Unavailable(out.reason or out.status)
        self.fail(h, err)

    def _refusal(self, h: RequestHandle, final: FinalOutput) -> BadRequest | Overloaded:
        """SLO-aware admission refused the request. A 400 naming the smallest feasible SLO when
        even alone on the fastest ready instance it could not make its SLO (a retry cannot
        help); otherwise a 429: the request is fine, the cluster is too busy for it now."""
        out, alone = final.outcome, final.alone
        if alone is not None and alone[0] > h.slo_s:
            seconds, tp = alone
            need_ms = math.ceil(seconds * 1000)
            hint = (
                f"send slo_ms >= {need_ms}"
                if h.slo_field == "slo_ms"
                else f"send a deadline at least {need_ms} ms ahead"
            )
            return BadRequest(
                f"{h.slo_field}: an SLO of {h.slo_s * 1000:.0f} ms cannot be met even alone on an idle "
                f"TP-{tp} instance at the lowest allowed threshold (predicted {seconds * 1000:.0f} ms); {hint}, "
                "or ask for fewer tokens",
                h.slo_field,
                reason="slo_infeasible",
            )
        return Overloaded(
            f"request refused: {out.reason}; retry after {out.retry_after_s:.0f} s, or with a longer {h.slo_field}",
            retry_after_s=out.retry_after_s,
            reason="slo",
        )
