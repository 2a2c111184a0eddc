"""Native modules for published bidirectional diffusion LMs (LLaDA, Dream).

Both families are a LLaMA-style decoder run without a causal mask: embedding ->
N x (RMSNorm, rotary attention, RMSNorm, SwiGLU MLP) -> RMSNorm -> LM head. They
differ in a few switches, collected in :class:`NativeSpec` (q/k/v bias, grouped-query
heads, tied head, Dream's one-position logit shift); ``llada.py`` and ``dream.py`` read
their published ``config.json`` into a spec and name their published tensors.

The model runs exactly like the embedded one (docs/architecture.md section 3): a
**recompute** pass over whole canvases that can return every layer's K/V, and a
**cache step** that feeds one block and attends to the cached K/V of the rest. The
building blocks are the embedded model's (RMSNorm, SwiGLU MLP, the cache-aware
:func:`~dilaserve.model.attention.attend`); only the rotary layout differs: these
checkpoints rotate the two halves of each head (``rotate_half``), not adjacent pairs.

Weights stay in the published layout except for two fusions done at load time: q, k
and v become one ``qkv`` projection and gate and up one ``gate_up`` (one matmul each
instead of three and two). :mod:`dilaserve.model.tensor_parallel` shards the fused
projections Megatron-style and the vocabulary-sized embedding and head by rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import SimpleNamespace

import torch
import torch.nn as nn

from .attention import attend, cache_keys
from .modeling import MLP, DiLaOutput, KVCache, RMSNorm


@dataclass(frozen=True)
class NativeSpec:
    """The hyperparameters of one native checkpoint, whatever its family calls them.

    Attributes:
        family: ``llada`` or ``dream``.
        vocab_size: rows of the embedding and of the head (the padded embedding size).
        hidden_size: width of the residual stream.
        num_layers: transformer blocks.
        num_heads / num_kv_heads: query heads and K/V heads (fewer: grouped-query).
        head_dim: width of one head.
        intermediate_size: width of the SwiGLU MLP.
        max_position_embeddings: longest canvas (prompt + generation) served.
        rope_theta: rotary base.
        rms_norm_eps: RMSNorm epsilon.
        qkv_bias: q, k and v projections carry a bias (Qwen2-style).
        tie_embeddings: the head reuses the embedding matrix.
        mask_token_id / eos_token_id / pad_token_id: the family's reserved ids.
        logit_shift: token i is predicted from position i - 1 (Dream).
        rope_full_precision: q and k are rotated in float32 and cast back (LLaDA's
            ``rope_full_precision``, on in its published config); off, the rotary tables are
            cast to the activations' dtype and the rotation runs there (Dream, as Qwen2).
            In float32 the two are the same; in bfloat16 they round differently.
    """

    family: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    max_position_embeddings: int
    rope_theta: float
    rms_norm_eps: float
    qkv_bias: bool
    tie_embeddings: bool
    mask_token_id: int
    eos_token_id: int
    pad_token_id: int
    logit_shift: bool
    rope_full_precision: bool = False

    def __post_init__(self) -> None:
        if (
            min(
                self.vocab_size,
                self.hidden_size,
                self.num_layers,
                self.num_heads,
                self.num_kv_heads,
                self.head_dim,
                self.intermediate_size,
                self.max_position_embeddings,
            )
            < 1
        ):
            raise ValueError(f"{self.family} config has a non-positive size: {asdict(self)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"{self.family} config: num_kv_heads ({self.num_kv_heads}) must divide num_heads ({self.num_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"{self.family} config: head width {self.head_dim} must be even for rotary positions")
        for name in ("mask_token_id", "eos_token_id", "pad_token_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(
                    f"{self.family} config: {name} {getattr(self, name)} is outside the vocabulary "
                    f"(0..{self.vocab_size - 1})"
                )


def rotary_cos_sin(head_dim: int, length: int, theta: float, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables (length, head_dim) of the ``rotate_half`` layout, in float32."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim))
    ang = torch.outer(torch.arange(length, dtype=torch.float32, device=device), inv)
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos(), ang.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions on (B, H, T, D) with the two halves of each head paired.

    The rotation runs in the tables' dtype and the result comes back in ``x``'s: float32
    tables rotate a bfloat16 ``x`` in full precision (LLaDA), tables cast to ``x``'s dtype
    rotate it there (Dream).
    """
    h = x.to(cos.dtype)
    half = h.shape[-1] // 2
    rotated = torch.cat((-h[..., half:], h[..., :half]), dim=-1)
    return (h * cos + rotated * sin).to(x.dtype)


class NativeAttention(nn.Module):
    """Rotary attention with a fused q|k|v projection and grouped-query K/V heads."""

    def __init__(self, spec: NativeSpec):
        super().__init__()
        self.n_head, self.n_kv_head, self.head_dim = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.qkv = nn.Linear(
            spec.hidden_size, (spec.num_heads + 2 * spec.num_kv_heads) * spec.head_dim, bias=spec.qkv_bias
        )
        self.out = nn.Linear(spec.num_heads * spec.head_dim, spec.hidden_size, bias=False)

    def forward(self, x, cos, sin, key_mask, past=None, block_index=None, write_rows=None):
        B, T, _ = x.shape
        D = self.head_dim
        q, k, v = self.qkv(x).split((self.n_head * D, self.n_kv_head * D, self.n_kv_head * D), dim=-1)
        q = rotate(q.view(B, T, self.n_head, D).transpose(1, 2), cos, sin)
        k = rotate(k.view(B, T, self.n_kv_head, D).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.n_kv_head, D).transpose(1, 2)
        y = attend(q, k, v, key_mask, past, block_index, write_rows)
        # n_head rather than the config's: a tensor-parallel shard holds fewer heads
        return self.out(y.transpose(1, 2).reshape(B, T, self.n_head * D)), (k, v)


class NativeBlock(nn.Module):
    def __init__(self, spec: NativeSpec):
        super().__init__()
        self.ln1 = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.attn = NativeAttention(spec)
        self.ln2 = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.mlp = MLP(SimpleNamespace(hidden_size=spec.hidden_size, intermediate_size=spec.intermediate_size))

    def forward(self, x, cos, sin, key_mask, past=None, block_index=None, write_rows=None):
        a, kv = self.attn(self.ln1(x), cos, sin, key_mask, past, block_index, write_rows)
        x = x + a
        return x + self.mlp(self.ln2(x)), kv


class NativeDiffusionLM(nn.Module):
    """A LLaDA or Dream checkpoint as a masked-diffusion LM with the dual cache."""

    def __init__(self, spec: NativeSpec):
        super().__init__()
        self.spec = spec
        # ``config`` answers what the profiler and the adapters ask of any model
        self.config = spec
        self.embed = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(NativeBlock(spec) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.head = nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        if spec.tie_embeddings:
            self.head.weight = self.embed.weight
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def max_context(self) -> int:
        return self.spec.max_position_embeddings

    def rope(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary tables covering ``length`` positions, grown on demand: Dream declares 131k
        positions, whose full tables would cost more memory than a served canvas needs."""
        if self._rope is None or self._rope[0].device != device or self._rope[0].shape[0] < length:
            n = min(self.max_context, 1 << max(8, (length - 1).bit_length()))
            self._rope = rotary_cos_sin(self.spec.head_dim, n, self.spec.rope_theta, device)
        return self._rope

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_kv: KVCache | None = None,
        past_mask: torch.Tensor | None = None,
        return_kv: bool = False,
        prompt_lengths: torch.Tensor | None = None,
        logit_positions: torch.Tensor | None = None,
        write_rows: torch.Tensor | None = None,
    ) -> DiLaOutput:
        """Run a recompute pass, or a cache step when ``past_kv`` is given.

        The arguments are :meth:`DiLaForMaskedDiffusion.forward`'s (positions unchecked
        here too, for capture), plus
        ``logit_positions`` (B, P): indices into the fed tokens whose logits are wanted
        (default all). A recompute step needs only the current block's, and at a
        vocabulary of 126k-152k the head over a whole canvas would cost more than the
        layers. ``prompt_lengths`` is accepted and ignored: these models attend
        bidirectionally over prompt and response alike. Logits are not shifted here
        (the adapter applies Dream's shift, in :meth:`DiffusionLM.full` with or without
        ``logit_positions``).
        """
        B, T = input_ids.shape
        dev = input_ids.device
        # the rotary tables must cover every position: the cache's length in a cache step
        # (positions lie inside it, as the engine checks before a step), else the fed tokens
        length = T if past_kv is None else past_kv[0][0].shape[2]
        if length > self.max_context:
            raise ValueError(
                f"{length} positions exceed the model's context ({self.max_context}); shorten the prompt or gen_length"
            )
        if position_ids is None:
            position_ids = torch.arange(T, device=dev).expand(B, T)
        if attention_mask is None:
            attention_mask = torch.ones(B, T, dtype=torch.bool, device=dev)
        keys, block_index = cache_keys(attention_mask, position_ids, past_kv, past_mask)
        key_mask = keys[:, None, None, :]  # every query sees the same keys
        x = self.embed(input_ids)
        cos, sin = self.rope(length, dev)
        rope_dtype = torch.float32 if self.spec.rope_full_precision else x.dtype
        cos, sin = cos[position_ids].unsqueeze(1).to(rope_dtype), sin[position_ids].unsqueeze(1).to(rope_dtype)
        kv_out: KVCache = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, cos, sin, key_mask, None if past_kv is None else past_kv[i], block_index, write_rows)
            if return_kv:
                kv_out.append(kv)
        h = self.norm(x)
        if logit_positions is not None:
            h = h.gather(1, logit_positions[..., None].expand(-1, -1, h.shape[-1]))
        return DiLaOutput(logits=self.head(h), kv=kv_out if return_kv else None)
