"""Per-instance denoising engine: batched, heterogeneous single steps.

``step(batch, thresholds)`` advances each request in ``batch`` by exactly one
denoising step. A batch may mix prompt lengths, blocks, thresholds and step
kinds: recompute requests run together over their whole canvases (and refresh
their K/V cache), cache-step requests run together over their current blocks
only. The scheduler above decides *which* requests step together; the engine
only makes one step cheap and exact.
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

from .state import RequestState, StepKind, conf_statistics, new_request
from .unmask import select_commits

DEFAULT_CHECKPOINT = Path(__file__).resolve().parents[2] / "data" / "models" / "dila-tiny"


@dataclass
class StepResult:
    """Outcome of one step for one request."""

    request_id: str
    kind: StepKind | None
    committed: int
    finished: bool
    error: str | None = None


@dataclass
class Generation:
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


def check_threshold(threshold: float) -> str | None:
    """Error text for a threshold outside (0, 1], else None."""
    if not isinstance(threshold, (int, float)) or math.isnan(threshold) or not 0.0 < threshold <= 1.0:
        return f"threshold {threshold!r} is outside (0, 1]: pick a confidence threshold such as 0.9"
    return None


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
    """One model replica and the K/V caches of the requests it is decoding."""

    def __init__(self, lm: DiffusionLM):
        self.lm = lm
        self._kv: dict[str, torch.Tensor] = {}  # request id -> (layers, 2, heads, T, head_dim)
        self._ids = itertools.count()

    @classmethod
    def from_pretrained(cls, path: str | Path = DEFAULT_CHECKPOINT, device: str = "cpu") -> DenoisingEngine:
        return cls(load_diffusion_lm(path, device=device))

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
        block_length: int = 32,
        use_cache: bool = True,
        request_id: str | None = None,
        max_tokens: int | None = None,
    ) -> RequestState:
        """Validate and build a request (raises ``ValueError`` with a fix on bad input).

        ``gen_length`` is the canvas, an upper bound: the answer ends at the model's EOS.
        ``max_tokens`` caps the answer inside it (None: the whole canvas).
        """
        ids = self.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("the prompt is empty: send at least one token")
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
        )

    def restore(self, blob: bytes) -> RequestState:
        """Adopt a migrated request: its next step rebuilds the cache."""
        state = RequestState.from_bytes(blob)
        state.block_cached = False
        return state

    def release(self, request_id: str) -> None:
        """Drop a request's cache (finished, cancelled or migrated away)."""
        self._kv.pop(request_id, None)

    def has_cache(self, request_id: str) -> bool:
        return request_id in self._kv

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
            if err is not None:
                results[i] = StepResult(st.request_id, None, 0, st.finished, err)
            elif st.use_cache and st.block_cached and st.request_id in self._kv:
                cached.append(i)
            else:
                recompute.append(i)
        # recompute passes run the whole canvas, so canvases of very different lengths
        # run apart rather than padded to the longest
        for group in length_groups(recompute, [batch[i].num_tokens for i in recompute]):
            self._run(batch, thresholds, group, StepKind.RECOMPUTE, results)
        # cache steps need one block length per forward pass (they feed the block alone,
        # so canvas lengths only pad the attention, which costs too little to split for)
        for bl in sorted({batch[i].block_length for i in cached}):
            self._run(batch, thresholds, [i for i in cached if batch[i].block_length == bl], StepKind.CACHE, results)
        return results  # type: ignore[return-value]

    def _run(self, batch, thresholds, idx: list[int], kind: StepKind, results: list) -> None:
        states = [batch[i] for i in idx]
        masks = [st.response[st.block_slice] == st.mask_id for st in states]
        # only the block's still-masked positions can be committed, so only their logits are
        # computed: at a vocabulary of 126k-152k the head is most of a cache step, and half a
        # block is masked on average. Rows are padded by repeating a request's own positions.
        cols = [np.flatnonzero(m) for m in masks]
        width = max(1, max(c.size for c in cols))
        rows = torch.from_numpy(np.stack([np.resize(c if c.size else np.zeros(1, np.int64), width) for c in cols]))
        if kind is StepKind.RECOMPUTE:
            masked_logits = self._recompute(states, rows)
        else:
            masked_logits = self._cache_step(states, rows)
        conf_rows, token_rows = self._confidences(masked_logits)
        for j, (i, st) in enumerate(zip(idx, states)):
            masked, n = masks[j], cols[j].size
            c = np.zeros(st.block_length, dtype=conf_rows.dtype)
            tok = np.zeros(st.block_length, dtype=token_rows.dtype)
            c[cols[j]], tok[cols[j]] = conf_rows[j, :n], token_rows[j, :n]
            pick = select_commits(c, masked, thresholds[i])
            st.apply_step(st.block_start + pick, tok[pick], thresholds[i], kind, conf_statistics(c[masked]))
            if st.finished:
                self.release(st.request_id)
            results[i] = StepResult(st.request_id, kind, int(pick.size), st.finished)

    def _confidences(self, logits: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """Top-1 probability and token per block position; never predict mask/pad."""
        logits = logits.float()
        logits[..., self.lm.mask_id] = -math.inf
        if self.lm.pad_id != self.lm.eos_id:
            logits[..., self.lm.pad_id] = -math.inf
        # top-1 probability = exp(max - logsumexp): two passes over the vocabulary and no
        # probability tensor, which at 126k-152k entries per position is most of the cost
        top, tok = logits.max(dim=-1)
        conf = torch.exp(top - torch.logsumexp(logits, dim=-1))
        return conf.cpu().numpy(), tok.cpu().numpy()

    def _recompute(self, states: list[RequestState], rows: torch.Tensor) -> torch.Tensor:
        """Full pass; refresh caches; return logits (B, P, V) at ``rows`` (B, P), positions
        in each request's current block."""
        dev = self.lm.device
        T = max(s.num_tokens for s in states)
        ids = torch.full((len(states), T), self.lm.pad_id, dtype=torch.long)
        attn = torch.zeros(len(states), T, dtype=torch.bool)
        for j, s in enumerate(states):
            ids[j, : s.num_tokens] = torch.from_numpy(np.concatenate((s.prompt_ids, s.response)))
            attn[j, : s.num_tokens] = True
        want_kv = any(s.use_cache for s in states)
        plen = torch.tensor([s.prompt_len for s in states])
        # only the blocks' rows get logits: at a vocabulary of 126k-152k the head over
        # whole canvases would cost more than the layers
        start = torch.tensor([s.prompt_len + s.block_start for s in states])
        out, kv = self.lm.full(
            ids.to(dev),
            attn.to(dev),
            return_kv=want_kv,
            prompt_lengths=plen.to(dev),
            logit_positions=(start[:, None] + rows).to(dev),
        )
        for j, s in enumerate(states):
            if s.use_cache and kv is not None:
                # (layers, 2, heads, T_j, head_dim), cloned so the batch tensor can be freed
                self._kv[s.request_id] = torch.stack(
                    [torch.stack((k[j, :, : s.num_tokens], v[j, :, : s.num_tokens])) for k, v in kv]
                ).clone()
        return out

    def _cache_step(self, states: list[RequestState], rows: torch.Tensor) -> torch.Tensor:
        """Feed only the current blocks; attend to cached K/V outside them; logits (B, P, V)
        at ``rows`` (B, P), positions in the block."""
        dev = self.lm.device
        B, Lb = len(states), states[0].block_length
        S = max(s.num_tokens for s in states)
        first = self._kv[states[0].request_id]
        L, _, H, _, D = first.shape
        # One padded copy per step, laid out so each layer's K and V are contiguous;
        # the model overwrites the blocks' entries in it, the request caches stay as they are.
        past = torch.zeros(L, 2, B, H, S, D, dtype=first.dtype, device=first.device)
        past_mask = torch.zeros(B, S, dtype=torch.bool)
        lead = self.lm.lead  # tokens before the block fed too (Dream predicts each from the one before)
        ids = torch.empty(B, lead + Lb, dtype=torch.long)
        pos = torch.empty(B, lead + Lb, dtype=torch.long)
        for j, s in enumerate(states):
            kvj = self._kv[s.request_id]
            past[:, :, j, :, : kvj.shape[3]] = kvj
            start = s.prompt_len + s.block_start
            past_mask[j, : s.num_tokens] = True
            block = s.response[s.block_slice]
            if lead:  # the prompt is never empty, so a token precedes every block
                before = s.response[s.block_start - lead : s.block_start] if s.block_start else s.prompt_ids[-lead:]
                block = np.concatenate((before, block))
            ids[j] = torch.from_numpy(block)
            pos[j] = torch.arange(start - lead, start + Lb)
        past_kv = [(past[layer, 0], past[layer, 1]) for layer in range(L)]
        return self.lm.block(ids.to(dev), pos.to(dev), past_kv, past_mask.to(dev), logit_positions=rows.to(dev))

    # ------------------------------------------------------------ generate
    def generate(
        self,
        prompts: Sequence[str | Sequence[int]],
        threshold: float = 0.9,
        gen_length: int | Sequence[int] = 64,
        block_length: int = 32,
        use_cache: bool = True,
        sequential: bool = False,
    ) -> list[Generation]:
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
            Generation(
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
