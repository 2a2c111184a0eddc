"""The serving runtime's front end: validation, tokenisation and streaming on the HTTP loop.

Requests enter through :meth:`ServingRuntime.prepare` (checks and tokenisation, which the API
runs off the event loop for a large body) and :meth:`ServingRuntime.submit`, which hands a
:class:`~dilaserve.control.request.TrackedRequest` to the engine core
(:class:`~dilaserve.serve.engine_core.EngineCore`: the scheduler, controller, reconfigurator
and Ray backend on a thread of their own) and awaits its admission. The core's outputs come
back in batches on this loop: each step's states (to stream committed blocks) and each
request's outcome (to resolve it). The scheduler is the very object the simulator drives.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np

from dilaserve.cluster import ray_local
from dilaserve.cluster.base import InstanceSpec
from dilaserve.cluster.ray_backend import RayBackend, RayBackendConfig
from dilaserve.control.request import TrackedRequest
from dilaserve.engine.engine import check_block_length
from dilaserve.engine.state import RequestState, new_request
from dilaserve.model.adapters import describe_checkpoint
from dilaserve.reconfig.config import ClusterConfig, ReconfigConfig
from dilaserve.reconfig.reconfigurator import Reconfigurator
from dilaserve.schedule import GlobalScheduler
from dilaserve.schedule.control_plane import ControlPlaneSpec, build_control_plane
from dilaserve.schedule.policies import get_policy

from .config import ServeConfig
from .control_inputs import ControlInputs, load_control_inputs
from .engine_core import Admitted, EngineCore, EngineOutput, FinalOutput, StepOutput
from .errors import BadRequest, Overloaded, Unavailable
from .metrics import ServeMetrics

log = logging.getLogger(__name__)


def connect_ray(cfg: ServeConfig) -> bool:
    """Join ``--ray-address`` or start a local cluster; True if this call started Ray.

    Call it before the HTTP server installs its signal handlers (see
    :func:`dilaserve.cluster.ray_local.connect`).
    """
    # CPU slots stand in for GPUs: one Ray CPU per TP rank.
    return ray_local.connect(cfg.ray_address, cfg.num_slots if cfg.device == "cpu" else None)


def cluster_config(cfg: ServeConfig) -> ClusterConfig:
    """The cluster the server may plan for: its slots as nodes, its TP degrees and batch limits."""
    return ClusterConfig(
        nodes=cfg.nodes,
        gpus_per_node=cfg.gpus_per_node,
        tp_degrees=tuple(cfg.tp_degrees),
        max_batch_tokens={d: cfg.max_batch_tokens * d for d in cfg.tp_degrees},
    )


def control_plane_spec(cfg: ServeConfig, inputs: ControlInputs) -> ControlPlaneSpec:
    """The server's per-concern configs, completed with what the artifacts measured (the
    step law) and the served model's block length."""
    rc = None
    if cfg.reconfig is not None:
        rc = replace(cfg.reconfig, block_length=cfg.block_length)
        rc = rc.with_step_law(inputs.step_law) if inputs.step_law else rc
    control = replace(cfg.control, step_law=inputs.step_law)
    return ControlPlaneSpec(
        inputs.profile,
        control,
        cluster_config(cfg),
        reconfig=rc,
        monitor=cfg.monitor,
        accuracy=inputs.accuracy,
        scheduler=cfg.scheduler,
        tuner=cfg.tuner,
        evaluator=_tuner_replay(cfg, inputs, control, rc),
    )


def _tuner_replay(cfg: ServeConfig, inputs: ControlInputs, control, reconfig):
    """The operating-point tuner's replay of the server's own cluster on its artifacts'
    step law (the simulator runs this same control plane), or None where the policy does
    not tune or the artifacts to replay are missing."""
    policy = get_policy(cfg.policy)
    if not policy.tune or inputs.replay is None:
        return None
    from dilaserve.sim.setting import ClusterSetting, Predictors  # the simulator, only for a tuning server
    from dilaserve.sim.window_replay import serving_replay

    table, quality = inputs.replay
    block_causal = bool(inputs.step_law and inputs.step_law.block_causal)
    setting = ClusterSetting(
        "serving",
        inputs.profile,
        cluster_config(cfg),
        control=control,
        reconfig=reconfig or ReconfigConfig(),
        block_length=cfg.block_length,
        block_causal=block_causal,
    )
    predictors = Predictors(inputs.predictor, inputs.oneshot, quality)
    return serving_replay(setting, table, quality, predictors, cfg.tuner, policy)


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


@dataclass(frozen=True)
class PreparedRequest:
    """A request checked and tokenised by :meth:`ServingRuntime.prepare`, ready to submit."""

    ids: list[int]
    gen_length: int
    max_tokens: int | None
    slo_s: float
    slo_field: str  # the field the SLO came from (slo_ms or deadline), for refusals
    priority: int = 0
    min_threshold: float = 0.0
    stops: tuple[str, ...] = ()


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


class ServingRuntime:
    def __init__(self, cfg: ServeConfig):
        self.cfg = cfg
        policy = get_policy(cfg.policy)  # unknown names fail here, with the list of choices
        if policy.predictor == "oracle":
            raise ValueError("the oracle policy needs the true remaining steps: it exists only in the simulator")
        self.policy = policy
        self.info = describe_checkpoint(cfg.model)
        # a block-diffusion model denoises blocks of the length it was trained on
        check_block_length(self.info.block_length, cfg.block_length)
        self.model_name = cfg.served_model_name or self.info.name
        self.metrics = ServeMetrics(self.model_name)
        self.handles: dict[str, RequestHandle] = {}
        self.accepting = False
        self.started = False
        self.notes: list[str] = []
        #: What the control plane runs on, for /health: the step predictor and latency profile.
        self.predictor_name: str | None = None
        self.profile_name: str | None = None
        self._ids = itertools.count()
        self._owns_ray = False
        self.core: EngineCore | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def scheduler(self) -> GlobalScheduler | None:
        """The core's scheduler: touch it only on the core's loop (``core.call``)."""
        return self.core.scheduler if self.core else None

    @property
    def backend(self) -> RayBackend | None:
        """The core's backend: touch it only on the core's loop (``core.call``)."""
        return self.core.backend if self.core else None

    # ================================================================ lifecycle
    async def start(self, ready_timeout_s: float | None = None) -> None:
        cfg = self.cfg
        ready_timeout_s = cfg.startup_timeout_s if ready_timeout_s is None else ready_timeout_s
        self.loop = asyncio.get_running_loop()
        # The engine core's thread shares the GIL with this loop: a short switch interval
        # bounds how long a woken front end waits behind the core's pure-Python work.
        sys.setswitchinterval(cfg.switch_interval_ms / 1000.0)
        self._owns_ray = connect_ray(cfg)
        usable = tuple(d for d in cfg.tp_degrees if d <= cfg.gpus_per_node)
        inputs = await asyncio.to_thread(
            load_control_inputs,
            cfg.model,
            cfg.device,
            cfg.thresholds,
            cfg.artifacts,
            usable if self.info.supports_cache else (1,),
            cfg.block_length,
            self.info.block_causal,
        )
        self.notes = inputs.notes
        predictor = inputs.oneshot if self.policy.predictor == "oneshot" else inputs.predictor
        self.predictor_name = predictor.name if self.policy.selection != "fixed" else "none (fixed threshold)"
        self.profile_name = inputs.profile.name
        spec = control_plane_spec(cfg, inputs)
        backend_cfg = RayBackendConfig(
            cfg.model,
            cfg.device,
            cfg.torch_threads,
            launch_timeout_s=cfg.startup_timeout_s,
            # a block-causal cache is exact and cheaper to ship than to rebuild (measured)
            ship_caches=self.info.block_causal,
        )
        metrics = self.metrics

        def build(core: EngineCore) -> tuple[RayBackend, GlobalScheduler]:
            backend = RayBackend(backend_cfg)
            scheduler = build_control_plane(backend, self.policy, spec, predictor, observer=core)
            # Queue gauges read the scheduler when scraped, so they are never stale.
            metrics.waiting.set_function(lambda: len(scheduler.deferred))
            metrics.running.set_function(lambda: scheduler.in_flight - len(scheduler.deferred))
            return backend, scheduler

        self.core = EngineCore(
            build,
            lambda outs: self.loop.call_soon_threadsafe(self._on_outputs, outs),
            metrics,
            cfg.reconfig.interval_s if cfg.reconfig is not None else None,
            cfg.max_batch_tokens,
            cfg.tp_degrees,
        )
        await asyncio.to_thread(self.core.start, self._initial_specs)
        deadline = time.monotonic() + ready_timeout_s
        while not self._ready_instances() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not self._ready_instances():
            raise RuntimeError(f"no instance became ready within {ready_timeout_s:.0f}s; see the Ray worker logs")
        self.accepting = self.started = True
        log.info(
            "serving %s with policy %s on %d instance(s)",
            self.model_name,
            self.policy.name,
            len(self._ready_instances()),
        )

    def _initial_specs(self, core: EngineCore) -> list[InstanceSpec]:
        cfg = self.cfg
        return [
            core.new_spec(cfg.initial_tp, n, g)
            for n in range(cfg.nodes)
            for g in range(0, cfg.gpus_per_node, cfg.initial_tp)
        ]

    def _ready_instances(self) -> list[str]:
        return list(self.core.snapshot.ready) if self.core else []

    def drained(self, deadline: float) -> bool:
        """Whether a drain may stop waiting: nothing in flight, no ready instance left to
        finish what is, or ``deadline`` (monotonic) passed."""
        return not self.handles or not self._ready_instances() or time.monotonic() >= deadline

    def check_accepting(self) -> None:
        """A 503 that says why, unless the server takes requests."""
        if not self.accepting:
            why = "shutting down; retry on another replica" if self.started else "starting up"
            raise Unavailable(f"the server is not accepting requests: it is {why}")

    def not_ready_reason(self) -> str | None:
        """Why the server cannot serve a request now (for the readiness probe); None when it can."""
        if not self.started:
            return "starting up: no instance is ready yet"
        if not self.accepting:
            return "shutting down"
        if not self._ready_instances():
            return "no instance is ready (all failed or are restarting); requests wait or fail"
        return None

    async def shutdown(self) -> None:
        """Stop accepting, let in-flight requests finish (bounded), fail the rest, free the cluster."""
        self.accepting = False
        deadline = time.monotonic() + self.cfg.drain_timeout_s
        # Nothing in flight can finish without a ready instance: stop waiting then.
        while self.handles and self._ready_instances() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for rid, h in list(self.handles.items()):
            self._fail(h, Unavailable("the server is shutting down; retry on another replica"))
            if self.core is not None:
                self.core.abort(rid, reason="server shutdown")
        self.handles.clear()
        if self.core is not None:
            await self.core.shutdown()
        if self._owns_ray:
            ray_local.disconnect(True)

    # ================================================================ requests
    def prepare(self, body) -> PreparedRequest:
        """Check and tokenise a parsed request (``protocol.CompletionRequest`` or chat); raises
        :class:`BadRequest` naming the field to change.

        It reads only the tokenizer and the config, never the scheduler, so the API runs it
        off the event loop for a large body.
        """
        if body.min_threshold > max(self.cfg.thresholds):
            raise BadRequest(
                f"min_threshold {body.min_threshold} is above every candidate threshold {sorted(self.cfg.thresholds)}",
                "min_threshold",
            )
        ids = self._tokenize(body.prompt, body.prompt_field)
        bl = self.cfg.block_length
        max_tokens = body.answer_limit
        gen_length = bl * math.ceil((max_tokens or self.cfg.default_max_tokens) / bl)
        self._check_context(len(ids), gen_length, body.limit_field, body.prompt_field)
        if body.deadline is not None:
            slo_s, slo_field = body.deadline - time.time(), "deadline"
            if slo_s <= 0:
                raise BadRequest(
                    f"deadline {body.deadline:.3f} is {-slo_s:.3f} s in the past: send a future unix time, or slo_ms",
                    "deadline",
                )
        else:
            slo_s, slo_field = (body.slo_ms if body.slo_ms is not None else self.cfg.default_slo_ms) / 1000.0, "slo_ms"
        if not math.isfinite(slo_s):  # the API refuses non-finite numbers; Python callers get the same
            raise BadRequest(f"{slo_field} must be a finite number", slo_field)
        return PreparedRequest(
            ids, gen_length, max_tokens, slo_s, slo_field, body.priority, body.min_threshold, body.stop_strings
        )

    async def submit(self, prep: PreparedRequest) -> RequestHandle:
        """Hand one prepared request to the engine core and wait for its admission; raises
        :class:`ServeError` subclasses (a refusal comes before any stream starts)."""
        self.check_accepting()
        if len(self.handles) >= self.cfg.max_queue:
            raise Overloaded(
                f"{len(self.handles)} requests in flight (limit --max-queue {self.cfg.max_queue}); retry later",
                retry_after_s=1.0,
            )
        now = self.core.backend.clock()  # a monotonic clock: safe from any thread
        rid = f"cmpl-{next(self._ids)}-{int(time.time() * 1000) % 10**8}"
        state = new_request(
            rid,
            prep.ids,
            prep.gen_length,
            self.cfg.block_length,
            self.info.mask_id,
            self.info.eos_id,
            use_cache=self.info.supports_cache,
            max_context=self.info.max_context,
            max_tokens=prep.max_tokens,
            block_causal=self.info.block_causal,
        )
        handle = RequestHandle(rid, len(prep.ids), prep.slo_s, now, slo_field=prep.slo_field, stops=prep.stops)
        loop = asyncio.get_running_loop()
        handle.admitted, handle.done = loop.create_future(), loop.create_future()
        self.handles[rid] = handle
        req = TrackedRequest(
            state, arrival=now, deadline=now + prep.slo_s, priority=prep.priority, min_threshold=prep.min_threshold
        )
        self.core.submit(req)
        await handle.admitted  # a refusal raises here, before any stream starts
        return handle

    def _tokenize(self, prompt: str, field_: str = "prompt") -> list[int]:
        """The prompt's token ids; a 400 naming the words the model does not know.

        A word-level tokenizer (the embedded model's) maps every word outside its vocabulary
        to the unknown token, and a decode from ``[UNK]`` answers garbage: such a prompt is
        refused, naming the words, rather than answered with them dropped. Subword tokenizers
        have no unknown words and never reach that branch.
        """
        tok = self.info.tokenizer
        enc = tok(prompt, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        if not ids:
            raise BadRequest("the prompt is empty after tokenisation", field_)
        unk = getattr(tok, "unk_token_id", None)
        if unk is not None and unk in ids:
            words = list(dict.fromkeys(prompt[a:b] for i, (a, b) in zip(ids, enc["offset_mapping"]) if i == unk))
            shown = ", ".join(repr(w) for w in words[:10]) + (f" and {len(words) - 10} more" if len(words) > 10 else "")
            raise BadRequest(
                f"the prompt holds {len(words)} word(s) outside the model's vocabulary ({shown}); "
                f"use words the model knows (e.g. a task prompt like 'list : c a f b')",
                field_,
            )
        return ids

    def _check_context(
        self, prompt_tokens: int, gen_length: int, limit_field: str = "max_tokens", prompt_field: str = "prompt"
    ) -> None:
        """A 400 naming the field to change when prompt + answer exceed the model's context."""
        limit, bl = self.info.max_context, self.cfg.block_length
        if limit is None or prompt_tokens + gen_length <= limit:
            return
        if prompt_tokens + bl > limit:
            raise BadRequest(
                f"the prompt has {prompt_tokens} tokens, too many for the model's context of {limit} "
                f"tokens with room for one {bl}-token block of answer: shorten the prompt",
                prompt_field,
            )
        most = (limit - prompt_tokens) // bl * bl
        raise BadRequest(
            f"{limit_field} rounds up to {gen_length} tokens, but with this {prompt_tokens}-token prompt "
            f"the model's context of {limit} tokens leaves room for at most {most}: lower {limit_field}",
            limit_field,
        )

    def cancel(self, handle: RequestHandle) -> None:
        """The client went away: free its slot (its in-flight step is dropped)."""
        if self.handles.pop(handle.request_id, None) is not None:
            self.core.abort(handle.request_id)
            self.metrics.requests.labels("cancelled").inc()

    # ================================================================ the core's outputs
    def _on_outputs(self, outputs: list[EngineOutput]) -> None:
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

    def _fail(self, h: RequestHandle, err: Exception) -> None:
        """End ``h`` with ``err``: before admission the submit raises it, after it the
        response (or stream) reports it."""
        h.chunks.put_nowait(None)
        if not h.admitted.done():
            h.admitted.set_exception(err)
            h.done.cancel()
        elif not h.done.done():
            h.done.set_exception(err)

    def _answer_text(self, h: RequestHandle, st: RequestState, upto: int) -> tuple[str, bool]:
        """The text of the answer's first ``upto`` positions (up to its EOS), cut before the
        first stop string; True when a stop string cut it."""
        ids = st.response[:upto]
        eos = np.flatnonzero(ids == st.eos_id)
        if eos.size:
            ids = ids[: eos[0]]
        text = self.info.tokenizer.decode(ids.tolist(), skip_special_tokens=True)
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
        if text != self.info.tokenizer.decode(answer.tolist(), skip_special_tokens=True):
            tokens = len(self.info.tokenizer(text, add_special_tokens=False)["input_ids"])  # cut by a stop string
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
        self._fail(h, err)

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

    def status(self) -> dict:
        return {
            "model": self.model_name,
            "policy": self.policy.name,
            "predictor": self.predictor_name,
            "profile": self.profile_name,
            "instances": self._ready_instances(),
            "worker_pids": (self.core.snapshot.worker_pids or {}) if self.core else {},
            "running": len(self.handles),
            "notes": self.notes,
            # the quality floors a request may ask for (min_threshold) go up to the highest
            "thresholds": sorted(self.cfg.thresholds),
        }


def reconfigure_to(runtime: ServingRuntime, node_counts: list[dict[int, int]]) -> bool:
    """Apply an operator-chosen configuration live (stage 2 only: least disruptive placement).

    ``node_counts`` gives, per node, instances per TP degree, e.g. ``[{2: 1}]`` for one
    TP-2 instance on a 2-slot node. Requests in flight migrate off drained instances;
    none is dropped. Returns False while a previous plan is still executing. Run it on the
    engine core's loop (``runtime.core.call(reconfigure_to, runtime, counts)``).
    """
    cfg = runtime.cfg
    sched = runtime.scheduler
    missing = sorted({d for nc in node_counts for d in nc if not sched.profile.has(d)})
    if missing:
        raise ValueError(
            f"the latency profile has no TP {missing}: instances of those degrees would get no "
            f"requests; measure them first (`make artifacts`) or choose from TP {list(sched.profile.tp_degrees)}"
        )
    reconf = sched.reconfigurator or Reconfigurator(cluster_config(cfg), sched.profile)
    plan = reconf.plan_to(node_counts, sched.pool.active_specs())
    return sched.apply_plan(plan)  # the runtime counts it, as the scheduler's observer
