"""Per-instance denoising engine: batched, heterogeneous single steps.

``step(batch, thresholds)`` advances each request in ``batch`` by exactly one
denoising step. A batch may mix prompt lengths, blocks, thresholds and step
kinds: recompute requests run together over their whole canvases (and refresh
their K/V cache), cache-step requests run together over their current blocks
only. The scheduler above decides *which* requests step together; the engine
only makes one step cheap and exact.

A block-causal model's requests (docs/architecture.md, "Block-diffusion models")
keep an exact cache of the prompt and finished blocks: their one recompute step,
the prefill, runs only up to the current block's end, and the cache step that
opens a block also feeds the block just finished and appends its K/V.

Every request's K/V live in one persistent pool, a slot per request
(:mod:`~dilaserve.engine.kv_pool`); a cache step attends to the pool in place and
writes only the fed tokens' fresh K/V (:mod:`~dilaserve.engine.cache_step`), from
a CUDA graph on CUDA (:mod:`~dilaserve.engine.graphs`); the unmask rule runs on the
device (:mod:`~dilaserve.engine.commit`). docs/architecture.md, "Engine memory
layout and captured steps", has the layout and the rules.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from dilaserve.model.adapters import DiffusionLM, load_diffusion_lm

from . import cache_step
from .cache_blob import cache_from_bytes, cache_to_bytes
from .cache_step import fed_length
from .commit import select_on_device
from .config import EngineConfig
from .defaults import DEFAULT_CHECKPOINT
from .graphs import CacheStepRunner
from .kv_pool import KVPool, PoolFull
from .state import RequestState, StepKind, conf_statistics, new_request

__all__ = ["DecodeResult", "DenoisingEngine", "EngineConfig", "PoolFull", "StepResult", "fed_length"]

#: Block length of requests to a bidirectional model unless they say otherwise.
DEFAULT_BLOCK_LENGTH = 32


@dataclass
class StepResult:
    """Outcome of one step for one request."""

    request_id: str
    kind: StepKind | None
    committed: int
    finished: bool
    error: str | None = None


@dataclass
class DecodeResult:
    """A finished request as returned by :meth:`DenoisingEngine.generate`."""

    request_id: str
    text: str
    token_ids: list
    steps: int
    recompute_steps: int
    thresholds: list = field(default_factory=list)
    #: ``stop``: the model ended its answer inside the canvas; ``length``: the canvas ran out first.
    finish_reason: str | None = None
    #: canvas positions committed over all steps (answer and EOS alone, before the EOS fill)
    tokens_committed: int = 0


def cached_prefix(st: RequestState) -> int:
    """Tokens a block-causal request's cache holds: the prompt and the finished blocks whose
    K/V are in it (all but the last, while its append is pending)."""
    return st.prompt_len + st.block_start - (st.block_length if st.append_pending else 0)


def check_block_length(model_block: int | None, block_length: int) -> None:
    """Raise if a request's block length differs from a block-causal model's (None: any)."""
    if model_block is not None and block_length != model_block:
        raise ValueError(
            f"block_length {block_length} does not match this block-diffusion model, which was trained "
            f"to denoise blocks of {model_block} tokens: use block length {model_block} "
            f"(the server's --block-length {model_block})"
        )


def _kind_name(block_causal: bool) -> str:
    return "block-causal" if block_causal else "bidirectional"


def check_threshold(threshold: float) -> str | None:
    """Error text for a threshold outside (0, 1], else None."""
    if not isinstance(threshold, (int, float)) or math.isnan(threshold) or not 0.0 < threshold <= 1.0:
        return f"threshold {threshold!r} is outside (0, 1]: pick a confidence threshold such as 0.9"
    return None


#: Context granule of captured cache steps unless the config names one (EngineConfig.context_granule).
CAPTURED_GRANULE = 128

#: Most of a recompute pass that may be padding before its batch is split.
MAX_PADDING = 0.25


def length_groups(idx: list[int], lengths: list[int], max_padding: float = MAX_PADDING) -> list[list[int]]:
    """Split ``idx`` into batches whose padding to their longest member stays under
    ``max_padding`` of the padded tokens: longest first, each batch takes the next
    shorter item while that holds (one forward pass per batch)."""
    order = sorted(range(len(idx)), key=lambda k: -lengths[k])
    groups: list[list[int]] = []
    longest = total = 0
    for k in order:
        if groups:
            padded = (len(groups[-1]) + 1) * longest
            if padded - (total + lengths[k]) <= max_padding * padded:
                groups[-1].append(idx[k])
                total += lengths[k]
                continue
        groups.append([idx[k]])
        longest = total = lengths[k]
    return groups


class DenoisingEngine:
    """One model replica and the K/V pool of the requests it is decoding."""

    def __init__(self, lm: DiffusionLM, config: EngineConfig | None = None):
        self.lm = lm
        self.config = config or EngineConfig()
        self._ids = itertools.count()
        # ids never predicted: the mask, and the pad where it is not the EOS
        banned = [lm.mask_id] + ([lm.pad_id] if lm.pad_id != lm.eos_id else [])
        self._banned = torch.tensor(banned, device=lm.device)
        #: Recompute steps whose K/V found no free slot (the request recomputes again next step).
        self.pool_misses = 0
        self.pool: KVPool | None = None
        self._runner: CacheStepRunner | None = None
        if lm.supports_cache:
            self.pool = KVPool.for_model(lm.model, lm.max_context, self.config)
            self._runner = CacheStepRunner(lm, self.pool, self.config.cuda_graphs)
            self._warm_rotary()

    def _warm_rotary(self) -> None:
        """Build the rotary tables for every position a slot holds now, so no step (captured or
        compiled) ever grows them."""
        model, dev = self.lm.model, self.lm.device
        if hasattr(model, "spec"):  # native: tables grow on demand
            model.rope(self.pool.slot_tokens, dev)
        else:
            model.rope(dev)

    @classmethod
    def from_pretrained(
        cls, path: str | Path = DEFAULT_CHECKPOINT, device: str = "cpu", config: EngineConfig | None = None
    ) -> DenoisingEngine:
        return cls(load_diffusion_lm(path, device=device), config)

    # ------------------------------------------------------------ requests
    @property
    def tokenizer(self):
        return self.lm.tokenizer

    def encode(self, prompt: str) -> list[int]:
        return self.tokenizer(prompt, add_special_tokens=False)["input_ids"]

    def new_request(
        self,
        prompt: str | Sequence[int],
        gen_length: int,
        block_length: int | None = None,
        use_cache: bool = True,
        request_id: str | None = None,
        max_tokens: int | None = None,
    ) -> RequestState:
        """Validate and build a request (raises ``ValueError`` with a fix on bad input).

        ``gen_length`` is the canvas, an upper bound: the answer ends at the model's EOS.
        ``max_tokens`` caps the answer inside it (None: the whole canvas). ``block_length``
        defaults to a block-diffusion model's own, else 32.
        """
        block_length = block_length or self.lm.block_length or DEFAULT_BLOCK_LENGTH
        ids = self.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("the prompt is empty: send at least one token")
        check_block_length(self.lm.block_length, block_length)
        return new_request(
            request_id or f"req-{next(self._ids)}-{uuid.uuid4().hex[:6]}",
            ids,
            gen_length,
            block_length,
            self.lm.mask_id,
            self.lm.eos_id,
            use_cache=use_cache and self.lm.supports_cache,
            max_context=self.lm.max_context,
            max_tokens=max_tokens,
            block_causal=self.lm.block_causal,
        )

    def restore(self, blob: bytes, cache: bytes | None = None) -> RequestState:
        """Adopt a migrated request. A block-causal request's ``cache`` (from
        :meth:`export_cache` on the source) lets it go on with a cache step; without it, or for
        a bidirectional request, the next step rebuilds the cache (block-causal: one prefill of
        the prompt, the finished blocks and the current block). docs/architecture.md,
        "Block-diffusion models", prices the two."""
        state = RequestState.from_bytes(blob)
        if state.block_causal != self.lm.block_causal:
            raise ValueError(
                f"request {state.request_id} was decoded by a {_kind_name(state.block_causal)} model but this "
                f"engine serves a {_kind_name(self.lm.block_causal)} one: migrate it only between instances "
                "of the same checkpoint"
            )
        state.drop_cache()
        if cache is not None:
            self.import_cache(state.request_id, cache)
        return state

    def export_cache(self, request_id: str) -> bytes | None:
        """A block-causal request's exact cache as bytes, to ship with a migration (None: no
        cache here, or a bidirectional model, whose approximate cache is rebuilt instead)."""
        kv = self.cache_of(request_id) if self.lm.block_causal else None
        return None if kv is None else cache_to_bytes(kv)

    def import_cache(self, request_id: str, blob: bytes | None) -> bool:
        """Adopt a shipped block-causal cache unless the request has one here at least as long
        (finished blocks only grow: a shorter one is stale, a longer one was built by a prefill
        that ran before the shipped cache arrived). The next step uses it if it holds exactly
        the blocks the request's state says are done (the prefix of a block-causal request
        never changes, so such a cache is exact). False too where no slot is free or the cache
        does not fit one: the request then rebuilds its cache with one prefill."""
        if blob is None or not self.lm.block_causal or self.pool is None:
            return False
        kv = cache_from_bytes(blob, self.lm.device)
        if self.has_cache(request_id) and self.pool.tokens(request_id) >= kv.shape[3]:
            return False
        try:
            self.pool.store(request_id, kv.to(self.pool.kv.dtype))
        except (PoolFull, ValueError):
            return False
        return True

    def release(self, request_id: str) -> None:
        """Free a request's slot (finished, cancelled or migrated away)."""
        if self.pool is not None:
            self.pool.release(request_id)

    def has_cache(self, request_id: str) -> bool:
        return self.pool is not None and self.pool.slot(request_id) is not None

    def cache_of(self, request_id: str) -> torch.Tensor | None:
        """A copy of the request's cache here, ``(layers, 2, heads, tokens, head_dim)``, or None."""
        return self.pool.view(request_id).clone() if self.has_cache(request_id) else None

    def cached_requests(self) -> frozenset[str]:
        """The requests holding a slot here (each released when it finishes or leaves)."""
        return frozenset() if self.pool is None else self.pool.requests()

    def can_admit(self, n: int = 1) -> bool:
        """Whether ``n`` more requests can take a K/V slot now. A request admitted without one
        still decodes, recomputing every step until a slot frees: callers that would rather
        make it wait ask this first (or catch :class:`PoolFull` from :meth:`reserve`)."""
        return self.pool is None or self.pool.can_admit(n)

    def reserve(self, state: RequestState) -> None:
        """Take a slot for ``state`` now, before its first step (raises :class:`PoolFull` with
        what to do when none is free; a no-op without the cache)."""
        if self.pool is not None and state.use_cache and self.pool.fits(state.num_tokens):
            self.pool.reserve(state.request_id)

    def _cache_ready(self, st: RequestState) -> bool:
        """Whether ``st``'s next step can be a cache step on this engine.

        A block-causal cache is exact and its prefix never changes, so it serves whenever it
        holds exactly the prompt and the blocks the state says are done, whatever
        ``block_cached`` says (a migration clears it; a shipped cache makes it moot). One of
        another length (left by an earlier visit of a request that moved away and back) waits
        for the prefill to replace it."""
        if not st.use_cache or not self.has_cache(st.request_id):
            return False
        if st.block_causal:
            return self.pool.tokens(st.request_id) == cached_prefix(st)
        return st.block_cached and self.pool.tokens(st.request_id) == st.num_tokens

    def decode(self, state: RequestState) -> str:
        return " ".join(self.tokenizer.convert_ids_to_tokens(state.answer_ids().tolist()))

    # ---------------------------------------------------------------- step
    def step(self, batch: Sequence[RequestState], thresholds: Sequence[float]) -> list[StepResult]:
        """Run one denoising step for every request in ``batch``.

        A request with a bad threshold, or one that is already finished, gets
        a result with ``error`` set and is left untouched; the rest step.
        """
        if len(batch) != len(thresholds):
            raise ValueError(f"{len(batch)} requests but {len(thresholds)} thresholds: pass one per request")
        results: list[StepResult | None] = [None] * len(batch)
        recompute, cached = [], []
        for i, (st, thr) in enumerate(zip(batch, thresholds)):
            err = check_threshold(thr) if thr != math.inf else None
            if err is None and st.finished:
                err = f"request {st.request_id} is already finished"
            if err is None and st.block_causal != self.lm.block_causal:
                err = (
                    f"request {st.request_id} is {_kind_name(st.block_causal)} but this engine serves a "
                    f"{_kind_name(self.lm.block_causal)} model"
                )
            if err is not None:
                results[i] = StepResult(st.request_id, None, 0, st.finished, err)
            elif self._cache_ready(st):
                cached.append(i)
            else:
                recompute.append(i)
        # recompute passes run the whole canvas (a block-causal prefill: up to the current
        # block's end), so contexts of very different lengths run apart, not padded to the longest
        for group in length_groups(recompute, [batch[i].context_tokens for i in recompute]):
            self._run(batch, thresholds, group, StepKind.RECOMPUTE, results)

        # cache steps need one fed length per forward pass: the block, or for a block-causal
        # request that opens a block, the finished block and the block. Context lengths only
        # pad the attention, which costs too little to split for. Appending requests run
        # apart rather than padding the others to twice the block: an append comes once per
        # block, so most cache steps have none, and padding would double the fed tokens of
        # the whole batch whenever one request appends (docs/architecture.md, "Block-diffusion
        # models", has the measurement).
        def shape(i: int) -> tuple[int, int]:
            return batch[i].block_length, fed_length(batch[i])

        for key in sorted({shape(i) for i in cached}):
            self._run(batch, thresholds, [i for i in cached if shape(i) == key], StepKind.CACHE, results)
        return results  # type: ignore[return-value]

    def _run(self, batch, thresholds, idx: list[int], kind: StepKind, results: list) -> None:
        states = [batch[i] for i in idx]
        masks = [st.response[st.block_slice] == st.mask_id for st in states]
        # only the block's still-masked positions can be committed, so only their logits are
        # computed: at a vocabulary of 126k-152k the head is most of a cache step, and half a
        # block is masked on average. Rows are padded by repeating a request's own positions;
        # a captured step computes the whole block (one static shape).
        cols = [np.flatnonzero(m) for m in masks]
        width = max(1, max(c.size for c in cols))
        if kind is StepKind.CACHE and self._runner.capture:
            width = states[0].block_length
        rows = np.stack([np.resize(c if c.size else np.zeros(1, np.int64), width) for c in cols])
        if kind is StepKind.RECOMPUTE:
            logits = self._recompute(states, torch.from_numpy(rows))
        else:
            logits = self._cache_step(states, rows)
        out = select_on_device(logits, [c.size for c in cols], [thresholds[i] for i in idx], self._banned)
        for j, (i, st) in enumerate(zip(idx, states)):
            n = cols[j].size
            pick = np.flatnonzero(out.commit[j, :n])
            st.apply_step(
                st.block_start + cols[j][pick],
                out.token[j, pick],
                thresholds[i],
                kind,
                conf_statistics(out.confidence[j, :n]),
            )
            if st.finished:
                self.release(st.request_id)
            results[i] = StepResult(st.request_id, kind, int(pick.size), st.finished)

    def _recompute(self, states: list[RequestState], rows: torch.Tensor) -> torch.Tensor:
        """Full pass; refresh caches; return logits (B, P, V) at ``rows`` (B, P), positions
        in each request's current block."""
        dev = self.lm.device
        # a block-causal prefill stops at the current block's end: nothing before it sees later blocks
        T = max(s.context_tokens for s in states)
        ids = torch.full((len(states), T), self.lm.pad_id, dtype=torch.long)
        attn = torch.zeros(len(states), T, dtype=torch.bool)
        for j, s in enumerate(states):
            n = s.context_tokens
            ids[j, :n] = torch.from_numpy(np.concatenate((s.prompt_ids, s.response[: n - s.prompt_len])))
            attn[j, :n] = True
        keep = [s.use_cache and self.pool is not None and self.pool.fits(s.num_tokens) for s in states]
        plen = torch.tensor([s.prompt_len for s in states])
        # only the blocks' rows get logits: at a vocabulary of 126k-152k the head over
        # whole canvases would cost more than the layers
        start = torch.tensor([s.prompt_len + s.block_start for s in states])
        out, kv = self.lm.full(
            ids.to(dev),
            attn.to(dev),
            return_kv=any(keep),
            prompt_lengths=plen.to(dev),
            logit_positions=(start[:, None] + rows).to(dev),
        )
        for j, s in enumerate(states):
            if not keep[j] or kv is None:
                continue
            # block-causal: keep the prompt and finished blocks only, whose K/V are exact;
            # the current block's change with every commit and are fed at each step
            n = s.prompt_len + s.block_start if s.block_causal else s.num_tokens
            try:
                self.pool.store_row(s.request_id, kv, j, n)
            except PoolFull:  # no slot free: decode on without the cache until one frees
                self.pool_misses += 1
        return out

    def _cache_step(self, states: list[RequestState], logit_rows: np.ndarray) -> torch.Tensor:
        """Feed only the current blocks; attend to the pooled K/V in place; logits (B, P, V)
        at ``logit_rows`` (B, P), positions in the block.

        Block-causal requests with ``append_pending`` (all or none of ``states``) are fed the
        finished block too; its fresh K/V, exact because nothing it attends to is masked or
        later, are written into the request's slot, which then holds it."""
        pool, runner = self.pool, self._runner
        granule = self.config.context_granule or (CAPTURED_GRANULE if runner.capture else states[0].block_length)
        plan = cache_step.plan(states, pool, granule, runner.capture)
        host, layout = cache_step.build_inputs(states, logit_rows, pool, self.lm, plan, static=runner.capture)
        if plan.window:
            logits = runner.run(host, layout, plan.first)
        else:
            scratch = cache_step.gathered(pool, plan)
            logits = runner.run_over(host, layout, [(layer[0], layer[1]) for layer in scratch])
            cache_step.write_back(pool, scratch, states, plan, self.lm.lead)
        back = fed_length(states[0]) - states[0].block_length
        if back:
            for s in states:  # the finished block's K/V are now in the slot
                pool.set_tokens(s.request_id, s.prompt_len + s.block_start)
        if plan.rows == list(range(plan.n_rows)):  # no padding rows, in order: nothing to pick
            return logits
        return logits[torch.tensor(plan.rows, device=logits.device)]

    # ------------------------------------------------------------ generate
    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        threshold: float = 0.9,
        gen_length: int | Sequence[int] = 64,
        block_length: int | None = None,
        use_cache: bool = True,
        sequential: bool = False,
    ) -> list[DecodeResult]:
        """Decode ``prompts`` to completion as one batch, built on :meth:`step`.

        ``sequential=True`` commits exactly one token per step (the quality
        reference a threshold is compared against).
        """
        err = check_threshold(threshold)
        if err:
            raise ValueError(err)
        lengths = [gen_length] * len(prompts) if isinstance(gen_length, int) else list(gen_length)
        states = [self.new_request(p, g, block_length, use_cache) for p, g in zip(prompts, lengths)]
        thr = math.inf if sequential else threshold
        active = list(states)
        while active:
            self.step(active, [thr] * len(active))
            active = [s for s in active if not s.finished]
        return [
            DecodeResult(
                s.request_id,
                self.decode(s),
                s.answer_ids().tolist(),
                s.steps_done,
                s.recompute_steps_done,
                list(s.thresholds_used),
                s.finish_reason,
                sum(s.tokens_per_step),
            )
            for s in states
        ]
