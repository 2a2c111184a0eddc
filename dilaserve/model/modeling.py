"""A small masked-diffusion transformer with dual KV caching.

The model is a linear stack: embedding -> N x (RMSNorm, bidirectional
rotary attention, RMSNorm, SwiGLU MLP) -> RMSNorm -> tied LM head. Attention is
bidirectional because a diffusion LM denoises every position at once.

Two ways to run it (DESIGN.md section 3):

* **recompute**: the whole canvas goes through, every layer's rotated K and V
  are returned so the engine can cache them;
* **cache step**: only the current block's tokens go through. Each layer
  attends to the cached K/V of everything *outside* the block plus the fresh
  K/V of the block itself. The block's stale cache entries are masked out,
  which is cheaper than scattering fresh values into a copy of the cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.utils import ModelOutput

from .configuration import DiLaConfig

#: Per-layer (K, V), each (batch, heads, seq, head_dim), rotary already applied to K.
KVCache = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class DiLaOutput(ModelOutput):
    logits: Optional[torch.Tensor] = None
    kv: Optional[KVCache] = None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def rotary_tables(head_dim: int, max_pos: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv)
    return torch.cos(ang), torch.sin(ang)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate (B, H, T, D) by per-position tables (B, 1, T, D/2)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: DiLaConfig):
        super().__init__()
        self.n_head = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, key_mask, past: Optional[tuple[torch.Tensor, torch.Tensor]] = None):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        new_kv = (k, v)
        if past is not None:
            # cache step: the block's fresh K/V join the cached ones (stale block
            # entries are excluded by key_mask).
            k = torch.cat((past[0], k), dim=2)
            v = torch.cat((past[1], v), dim=2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=key_mask)
        # n_head * head_dim rather than the model width: a tensor-parallel shard holds fewer heads
        return self.out(y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)), new_kv


class MLP(nn.Module):
    def __init__(self, cfg: DiLaConfig):
        super().__init__()
        self.gate_up = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: DiLaConfig):
        super().__init__()
        self.ln1 = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg)
        self.ln2 = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, key_mask, past=None):
        a, kv = self.attn(self.ln1(x), cos, sin, key_mask, past)
        x = x + a
        return x + self.mlp(self.ln2(x)), kv


class DiLaPreTrainedModel(PreTrainedModel):
    config_class = DiLaConfig
    base_model_prefix = "dila"
    _no_split_modules = ["Block"]

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=std)
        elif isinstance(module, RMSNorm):
            nn.init.ones_(module.weight)


class DiLaForMaskedDiffusion(DiLaPreTrainedModel):
    """Masked-diffusion LM: predicts the clean token at every position."""

    def __init__(self, config: DiLaConfig):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        # The output head reuses the input embedding (tied): copying a prompt token
        # into the answer, the core skill of the tasks, is then learned almost at once.
        # Rotary tables are derived from the config, not saved. They are built
        # lazily: from_pretrained materialises modules on a meta device, which
        # would leave a non-persistent buffer uninitialised.
        self._rope: Optional[tuple[torch.Tensor, torch.Tensor]] = None
        self.post_init()

    def rope(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        if self._rope is None or self._rope[0].device != device:
            cfg = self.config
            cos, sin = rotary_tables(cfg.hidden_size // cfg.num_heads, cfg.max_position_embeddings, cfg.rope_theta)
            self._rope = (cos.to(device), sin.to(device))
        return self._rope

    @property
    def max_context(self) -> int:
        return self.config.max_position_embeddings

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        position_ids: Optional[torch.Tensor] = None,
        past_kv: Optional[KVCache] = None,
        past_mask: Optional[torch.Tensor] = None,
        return_kv: bool = False,
        prompt_lengths: Optional[torch.Tensor] = None,
    ) -> DiLaOutput:
        """Run a recompute pass, or a cache step when ``past_kv`` is given.

        Args:
            input_ids: (B, T) tokens; for a cache step, the block's tokens.
            attention_mask: (B, T) 1 for real tokens, 0 for padding.
            position_ids: (B, T) absolute positions (defaults to 0..T-1).
            past_kv: cached per-layer K/V (B, H, S, D) from a recompute pass.
            past_mask: (B, S) 1 for cached keys to attend to (0 for padding and
                for the block's own stale entries).
            return_kv: return each layer's K/V for caching.
            prompt_lengths: (B,) prompt length per row; with ``config.isolate_prompt``
                the prompt then attends only to itself (a cache step feeds response
                tokens only, so it needs none).
        """
        B, T = input_ids.shape
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        if int(position_ids.max()) >= self.config.max_position_embeddings:
            raise ValueError(
                f"position {int(position_ids.max())} exceeds the model's context "
                f"({self.config.max_position_embeddings}); shorten the prompt or gen_length"
            )
        cos_t, sin_t = self.rope(input_ids.device)
        cos = cos_t[position_ids].unsqueeze(1)
        sin = sin_t[position_ids].unsqueeze(1)
        if attention_mask is None:
            attention_mask = torch.ones(B, T, dtype=torch.bool, device=input_ids.device)
        keys = attention_mask.bool()
        if past_kv is not None:
            keys = torch.cat((past_mask.bool(), keys), dim=1)
        key_mask = keys[:, None, None, :]  # broadcast over heads and queries
        if prompt_lengths is not None and self.config.isolate_prompt and past_kv is None:
            in_prompt = position_ids < prompt_lengths.to(position_ids.device)[:, None]  # (B, T)
            # query i may see key j unless i is in the prompt and j is not
            allowed = keys[:, None, :] & (~in_prompt[:, :, None] | in_prompt[:, None, :])
            key_mask = allowed[:, None]  # (B, 1, T, T)

        x = self.embed(input_ids)
        kv_out: KVCache = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, cos, sin, key_mask, None if past_kv is None else past_kv[i])
            if return_kv:
                kv_out.append(kv)
        logits = F.linear(self.norm(x), self.embed.weight)
        return DiLaOutput(logits=logits, kv=kv_out if return_kv else None)
