"""A cache step over the K/V pool: its static-shape inputs and its run (eager or captured).

Row ``r`` of a pooled cache step is slot ``first + r`` of the pool: the step attends to a
window of slots in place (docs/architecture.md, "Engine memory layout and captured steps").
A captured step's window starts at slot 0 (a graph holds its addresses) and spans the batch
bucket of its highest slot; an eager one spans exactly its lowest to its highest slot. A slot
in the window whose request is not in the step (free, recomputing, or not scheduled) is a
padding row: it is fed pad tokens, attends only to them and writes nothing. The slots in use
are the pool's first ones, so the window is mostly the step's own requests; where it is not
(a captured window over twice the batch's bucket, an eager one with more padding rows than
:data:`EAGER_PADDING` allows), the step gathers its requests' slots into a scratch batch and
writes the fed K/V back.

Every check on positions happens here, on the host, before the step: the forward makes no
host synchronisation, so the same step runs eagerly, from a CUDA graph, or compiled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dilaserve.model.adapters import DiffusionLM

from .config import batch_bucket, context_bucket
from .kv_pool import KVPool
from .state import RequestState


@dataclass
class CacheStepInputs:
    """One pooled cache step's inputs, ``R`` rows on the model's device.

    ``ids``/``positions`` (R, lead + fed); ``past_mask`` (R, S) the cached keys each row may
    see; ``logit_rows`` (R, P) fed-token indices whose logits are wanted; ``write_rows`` (R,)
    the rows that are a request's (None: all of them, in an eager step without padding rows);
    ``prompt_lengths`` (R,) for block-causal models, else None.
    """

    ids: torch.Tensor
    positions: torch.Tensor
    past_mask: torch.Tensor
    logit_rows: torch.Tensor
    write_rows: torch.Tensor | None
    prompt_lengths: torch.Tensor | None


@dataclass(frozen=True)
class Layout:
    """The static shape of a cache step's inputs, packed in one int64 buffer so that they
    cross to the device in one copy; a captured graph is specialised to one layout."""

    rows: int
    width: int  # fed tokens per row, the lead included
    tokens: int  # attended length
    logits: int  # logit rows per row
    write_rows: bool
    prompt_lengths: bool

    def sizes(self) -> list[int]:
        R = self.rows
        extra = [R] * (int(self.write_rows) + int(self.prompt_lengths))
        return [R * self.width, R * self.width, R * self.tokens, R * self.logits, *extra]


def unpack(buf: torch.Tensor, layout: Layout) -> CacheStepInputs:
    """Views of the packed buffer (booleans converted): capture-safe, so a graph reads its
    one input buffer and unpacks it itself."""
    R = layout.rows
    parts = list(buf.split(layout.sizes()))
    ids, pos, mask, rows = (parts.pop(0).view(R, -1) for _ in range(4))
    write = parts.pop(0).bool() if layout.write_rows else None
    plen = parts.pop(0) if layout.prompt_lengths else None
    return CacheStepInputs(ids, pos, mask.bool(), rows, write, plen)


def fed_length(st: RequestState) -> int:
    """Tokens a cache step feeds: the block, plus the finished block it appends, if any."""
    return st.block_length * (2 if st.append_pending else 1)


#: Padding rows an eager window may carry, as a share of its requests (at least one): each
#: costs a row of compute, where a gather costs a copy of every request's K/V.
EAGER_PADDING = 0.25


@dataclass
class CachePlan:
    """Where each request of a cache step sits: row ``rows[j]`` of ``n_rows``; with ``window``
    row ``r`` is pool slot ``first + r``, else row ``j`` of a gathered scratch batch of ``slots``."""

    rows: list[int]
    n_rows: int
    tokens: int
    window: bool
    slots: list[int]
    first: int = 0


def plan(states: list[RequestState], pool: KVPool, granule: int, captured: bool) -> CachePlan:
    """Window or gather, and the attended length: the longest context, rounded up."""
    slots = [pool.slot(s.request_id) for s in states]
    tokens = context_bucket(max(s.context_tokens for s in states), granule, pool.slot_tokens)
    B = len(states)
    if captured:
        n_rows = batch_bucket(max(slots) + 1)
        if n_rows > pool.capacity and not pool.ensure_capacity(n_rows):
            n_rows = pool.capacity  # a pool smaller than the bucket: its whole size, one static shape
        if n_rows <= 2 * batch_bucket(B):
            return CachePlan(slots, n_rows, tokens, True, slots)
    else:
        first = min(slots)
        n_rows = max(slots) + 1 - first
        if n_rows - B <= max(1, int(EAGER_PADDING * B)):
            return CachePlan([s - first for s in slots], n_rows, tokens, True, slots, first)
    return CachePlan(list(range(B)), B, tokens, False, slots)


def build_inputs(
    states: list[RequestState],
    logit_rows: np.ndarray,
    pool: KVPool,
    lm: DiffusionLM,
    p: CachePlan,
    static: bool = False,
) -> tuple[np.ndarray, Layout]:
    """The step's inputs for ``states`` at their plan rows, packed on the host; ``logit_rows``
    (B, P) are block positions whose logits are wanted. ``static``: a captured step's, whose
    layout keeps ``write_rows`` whether or not it has padding rows."""
    R, S, lead = p.n_rows, p.tokens, lm.lead
    fed = fed_length(states[0])
    back = fed - states[0].block_length  # the finished block fed before the block, when appending
    padded = len(states) < R
    layout = Layout(R, lead + fed, S, logit_rows.shape[1], static or padded, lm.block_causal)
    host = np.zeros(sum(layout.sizes()), dtype=np.int64)
    views = np.split(host, np.cumsum(layout.sizes())[:-1])
    ids, pos, past_mask, rows = (v.reshape(R, -1) for v in views[:4])
    write = views[4] if layout.write_rows else np.zeros(R, dtype=np.int64)
    plen = views[-1] if layout.prompt_lengths else np.zeros(R, dtype=np.int64)
    ids[:] = lm.pad_id
    pos[:] = np.arange(layout.width)
    for j, s in enumerate(states):
        r = p.rows[j]
        start = s.prompt_len + s.block_start
        if start + s.block_length > S:  # the engine's invariant, checked here rather than in the forward
            raise ValueError(f"request {s.request_id}'s block ends past the attended length {S}")
        block = s.response[s.block_start - back : s.block_start + s.block_length]
        if lead:  # the prompt is never empty, so a token precedes every block
            before = s.response[s.block_start - lead : s.block_start] if s.block_start else s.prompt_ids[-lead:]
            block = np.concatenate((before, block))
        ids[r] = block
        pos[r] = np.arange(start - back - lead, start + s.block_length)
        past_mask[r, : pool.tokens(s.request_id)] = 1
        rows[r] = logit_rows[j] + back
        write[r] = 1
        plen[r] = s.prompt_len
    return host, layout


def to_device(host: np.ndarray, device: torch.device) -> torch.Tensor:
    """The packed inputs on ``device``: one copy."""
    return torch.from_numpy(host).to(device, non_blocking=True)


def forward(lm: DiffusionLM, past_kv: list, x: CacheStepInputs) -> torch.Tensor:
    """The model's cache step on ``x`` over ``past_kv`` (written in place): logits (R, P, V)."""
    return lm.block(
        x.ids,
        x.positions,
        past_kv,
        x.past_mask,
        logit_positions=x.logit_rows,
        prompt_lengths=x.prompt_lengths,
        write_rows=x.write_rows,
        checked=True,
    )


def packed_forward(lm: DiffusionLM, past_kv: list, buf: torch.Tensor, layout: Layout) -> torch.Tensor:
    """:func:`forward` on packed inputs. Capture-safe: this is what a CUDA graph records and
    what ``torch.compile(fullgraph=True)`` traces in the tests."""
    return forward(lm, past_kv, unpack(buf, layout))


def gathered(pool: KVPool, p: CachePlan) -> torch.Tensor:
    """A scratch copy of the plan's slots, ``(layers, 2, B, kv_heads, tokens, head_dim)``."""
    index = torch.tensor(p.slots, device=pool.kv.device)
    return pool.kv[:, :, :, :, : p.tokens].index_select(2, index)


def write_back(pool: KVPool, scratch: torch.Tensor, states: list[RequestState], p: CachePlan, lead: int) -> None:
    """Copy each request's fed positions from a gathered scratch batch into its slot."""
    for j, s in enumerate(states):
        start = s.prompt_len + s.block_start
        lo = start - (fed_length(s) - s.block_length) - lead
        pool.kv[:, :, p.slots[j], :, lo : start + s.block_length] = scratch[:, :, j, :, lo : start + s.block_length]
