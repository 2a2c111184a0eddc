"""A small masked-diffusion transformer with dual KV caching.

The model is a linear stack: embedding -> N x (RMSNorm, bidirectional
rotary attention, RMSNorm, SwiGLU MLP) -> RMSNorm -> tied LM head. Attention is
bidirectional because a diffusion LM denoises every position at once.

Two ways to run it (docs/architecture.md section 3):

* **recompute**: the whole canvas goes through, every layer's rotated K and V
  are returned so the engine can cache them;
* **cache step**: only the current block's tokens go through. Each layer
  attends to the cached K/V of everything *outside* the block plus the fresh
  K/V of the block itself, written over the block's stale entries in the
  cache, in place (the engine passes views of its persistent pool): cheaper
  than concatenating, which would copy the whole cache once per layer.

The forward makes no host synchronisation and no data-dependent shape, so the
engine can capture a cache step (docs/architecture.md, "Engine memory layout and
captured steps"); positions are checked before a step, by the engine or the adapter.

With ``config.block_causal`` the same two passes serve block diffusion: a token
attends to the prompt, to earlier blocks and to its own block only, so the K/V
of the prompt and of every finished block are exact, and a cache step denoises
the current block against them (docs/architecture.md, "Block-diffusion models").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers import PreTrainedModel
from transformers.utils import ModelOutput

from .attention import attend, block_visible, cache_keys
from .configuration import DiLaConfig

#: Per-layer (K, V), each (batch, heads, seq, head_dim), rotary already applied to K.
KVCache = list[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class DiLaOutput(ModelOutput):
    logits: torch.Tensor | None = None
    kv: KVCache | None = None


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # statistics in float32 (a no-op for float32 inputs): in bfloat16 the mean of squares
        # over thousands of features loses the precision the checkpoints were trained with
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotary_tables(head_dim: int, max_pos: int, theta: float) -> torch.Tensor:
    """Unit complex rotations (max_pos, head_dim/2), one per position and dimension pair."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    ang = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv)
    return torch.polar(torch.ones_like(ang), ang)


def apply_rotary(x: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
    """Rotate each (even, odd) pair of (B, H, T, D) by per-position rotations (B, 1, T, D/2).

    Viewing the pairs as complex numbers turns the rotation into one complex
    multiply: at large batches a step is bound by memory passes over
    activations, and the real-valued form took six of them.
    """
    pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(pairs * rot).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: DiLaConfig):
        super().__init__()
        self.n_head = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size, bias=False)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)

    def forward(
        self,
        x,
        rot,
        key_mask,
        past: tuple[torch.Tensor, torch.Tensor] | None = None,
        block_index: torch.Tensor | None = None,
        write_rows: torch.Tensor | None = None,
    ):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, rot), apply_rotary(k, rot)
        y = attend(q, k, v, key_mask, past, block_index, write_rows)
        # n_head * head_dim rather than the model width: a tensor-parallel shard holds fewer heads
        return self.out(y.transpose(1, 2).reshape(B, T, self.n_head * self.head_dim)), (k, v)


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

    def forward(self, x, rot, key_mask, past=None, block_index=None, write_rows=None):
        a, kv = self.attn(self.ln1(x), rot, key_mask, past, block_index, write_rows)
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
        self._rope: torch.Tensor | None = None
        self.post_init()

    def rope(self, device: torch.device) -> torch.Tensor:
        if self._rope is None or self._rope.device != device:
            cfg = self.config
            self._rope = rotary_tables(
                cfg.hidden_size // cfg.num_heads, cfg.max_position_embeddings, cfg.rope_theta
            ).to(device)
        return self._rope

    # The embedding accessors let transformers' ``resize_token_embeddings`` grow a
    # checkpoint's vocabulary when the task language gains words; the head stays tied.
    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed = value

    @property
    def max_context(self) -> int:
        return self.config.max_position_embeddings

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_kv: KVCache | None = None,
        past_mask: torch.Tensor | None = None,
        return_kv: bool = False,
        prompt_lengths: torch.Tensor | None = None,
        write_rows: torch.Tensor | None = None,
    ) -> DiLaOutput:
        """Run a recompute pass, or a cache step when ``past_kv`` is given.

        Args:
            input_ids: (B, T) tokens; for a cache step, the block's tokens.
            attention_mask: (B, T) 1 for real tokens, 0 for padding.
            position_ids: (B, T) absolute positions (defaults to 0..T-1).
            past_kv: cached per-layer K/V (B, H, S, D) of the whole canvas, from a
                recompute pass. A cache step writes the block's fresh K/V over its
                stale entries (at ``position_ids``) in place: pass the engine pool's views,
                or a copy you may overwrite.
            past_mask: (B, S) 1 for cached keys to attend to, 0 for padding; the
                block's own positions are attended to whatever it says.
            return_kv: return each layer's K/V for caching.
            prompt_lengths: (B,) prompt length per row. With ``config.isolate_prompt``
                (the default) a full pass needs it: the prompt attends only to itself,
                and a canvas does not say where its prompt ends (a committed answer
                is made of the prompt's own words), so a full pass without it raises
                rather than let the prompt see the response. A cache step feeds
                response tokens only and needs none, except in block-causal mode,
                where every key's block is counted from the prompt's end.
            write_rows: (B,) for a cache step over pooled slots: the rows that are a request's;
                the others are padding and leave their slot's K/V as they were.

        Positions must lie inside the model's context and, in a cache step, inside the cache
        (``past_kv``'s length): the forward does not check them, since a check would cost a
        host synchronisation and break capture (the engine checks them before a step).
        """
        # block-causal cache steps need them too: a key's block is counted from the prompt's end
        needs_prompt = self.config.isolate_prompt and (past_kv is None or self.config.block_causal)
        if prompt_lengths is None and needs_prompt:
            raise ValueError(
                "this model's prompt attends only to itself (config.isolate_prompt), and a canvas does not "
                "say where its prompt ends: pass prompt_lengths=torch.tensor([...]), one prompt length per "
                "row, e.g. model(input_ids, prompt_lengths=torch.tensor([len(prompt_ids)]))"
            )
        B, T = input_ids.shape
        if prompt_lengths is not None and tuple(prompt_lengths.shape) != (B,):
            raise ValueError(
                f"prompt_lengths has shape {tuple(prompt_lengths.shape)} but input_ids has {B} rows: "
                f"pass one prompt length per row, shape ({B},)"
            )
        if past_kv is None and T > self.config.max_position_embeddings:
            raise ValueError(
                f"{T} tokens exceed the model's context ({self.config.max_position_embeddings}); "
                "shorten the prompt or gen_length"
            )
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        rot = self.rope(input_ids.device)[position_ids].unsqueeze(1)
        if attention_mask is None:
            attention_mask = torch.ones(B, T, dtype=torch.bool, device=input_ids.device)
        keys, block_index = cache_keys(attention_mask, position_ids, past_kv, past_mask)
        key_mask = keys[:, None, None, :]  # broadcast over heads and queries
        if self.config.block_causal:
            S = keys.shape[1]
            key_pos = position_ids if past_kv is None else torch.arange(S, device=keys.device).expand(B, S)
            plen = prompt_lengths.to(position_ids.device)
            visible = block_visible(position_ids, key_pos, plen, self.config.block_length)
            key_mask = (keys[:, None, :] & visible)[:, None]  # (B, 1, T, S)
        elif self.config.isolate_prompt and past_kv is None:
            in_prompt = position_ids < prompt_lengths.to(position_ids.device)[:, None]  # (B, T)
            # query i may see key j unless i is in the prompt and j is not
            allowed = keys[:, None, :] & (~in_prompt[:, :, None] | in_prompt[:, None, :])
            key_mask = allowed[:, None]  # (B, 1, T, T)

        x = self.embed(input_ids)
        kv_out: KVCache = []
        for i, layer in enumerate(self.layers):
            x, kv = layer(x, rot, key_mask, None if past_kv is None else past_kv[i], block_index, write_rows)
            if return_kv:
                kv_out.append(kv)
        logits = F.linear(self.norm(x), self.embed.weight)
        if self.config.logit_temperature != 1.0:
            logits = logits / self.config.logit_temperature
        return DiLaOutput(logits=logits, kv=kv_out if return_kv else None)
