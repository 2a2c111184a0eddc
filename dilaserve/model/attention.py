"""The attention seam shared by the embedded model and the native LLaDA / Dream modules.

Both run the same two passes (docs/architecture.md section 3): a recompute pass over whole
canvases and a cache step that feeds one block and attends to cached K/V. In a cache step the
cached K/V are views into the engine's persistent pool (docs/architecture.md, "Engine memory
layout and captured steps"): the block's fresh K/V are written into them in place and the
attention reads them there, so nothing is gathered or copied per step.

Every function here is capture-safe: no host synchronisation (``.item()``, ``int(tensor)``)
and no shape that depends on data, so a cache step can be replayed from a CUDA graph and
compiles with ``torch.compile(fullgraph=True)``. Position checks live in the engine (and, for
direct callers, in :func:`check_positions`), before a step.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def check_positions(positions: torch.Tensor, limit: int, what: str, fix: str) -> None:
    """Raise if a position reaches ``limit``: one host synchronisation, for callers outside
    the engine (the engine checks its positions on the host before a step)."""
    last = int(positions.max())
    if last >= limit:
        raise ValueError(f"position {last} lies outside {what} ({limit} entries): {fix}")


def write_fresh(
    past: torch.Tensor, fresh: torch.Tensor, index: torch.Tensor, write_rows: torch.Tensor | None
) -> torch.Tensor:
    """Write ``fresh`` (B, H, T, D) into the cached ``past`` (B, H, S, D) at ``index``, in
    place, and return ``past``.

    ``write_rows`` (B,) marks the rows of a step that belong to a request; the other rows of
    a pooled step are padding over slots that may hold another request's cache, so they
    write back what is there (a gather of the fed positions only, not of the cache).
    """
    if write_rows is not None:
        fresh = torch.where(write_rows[:, None, None, None], fresh, past.gather(2, index))
    return past.scatter_(2, index, fresh)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    key_mask: torch.Tensor,
    past: tuple[torch.Tensor, torch.Tensor] | None = None,
    block_index: torch.Tensor | None = None,
    write_rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of ``q`` (B, H, T, D) over fresh ``k``/``v`` (B, Hkv, T, D), or over the cache.

    In a cache step (``past`` given) the block's fresh K/V overwrite its stale entries in
    the cache, in place, at ``block_index``; concatenating instead would copy the whole
    cache. Fewer K/V heads than query heads (grouped-query attention) are shared by
    consecutive query heads.
    """
    if past is not None:
        k = write_fresh(past[0], k, block_index, write_rows)
        v = write_fresh(past[1], v, block_index, write_rows)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask, enable_gqa=k.shape[1] != q.shape[1])


def cache_keys(
    attention_mask: torch.Tensor, position_ids: torch.Tensor, past_kv, past_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The (B, S) keys a pass may attend to, and a cache step's scatter index (B, Hkv, T, D).

    A recompute pass attends to the real (unpadded) tokens; a cache step to the cached keys
    of ``past_mask`` plus the fed block's own positions.
    """
    keys = attention_mask.bool()
    if past_kv is None:
        return keys, None
    keys = past_mask.bool().scatter(1, position_ids, keys)
    B, T = position_ids.shape
    H, D = past_kv[0][0].shape[1], past_kv[0][0].shape[3]
    return keys, position_ids[:, None, :, None].expand(B, H, T, D)


def block_of(positions: torch.Tensor, prompt_lengths: torch.Tensor, block_length: int) -> torch.Tensor:
    """Block index of each position (B, N): -1 in the prompt, then 0, 1, ... every ``block_length``."""
    offset = positions - prompt_lengths[:, None]
    return torch.where(offset < 0, -1, torch.div(offset, block_length, rounding_mode="floor"))


def block_visible(
    query_pos: torch.Tensor, key_pos: torch.Tensor, prompt_lengths: torch.Tensor, block_length: int
) -> torch.Tensor:
    """Block-causal visibility (B, T, S): a query sees keys of its own block and earlier ones.

    The prompt is block -1, so it sees only itself, as with ``isolate_prompt``.
    """
    q = block_of(query_pos, prompt_lengths, block_length)
    k = block_of(key_pos, prompt_lengths, block_length)
    return k[:, None, :] <= q[:, :, None]
