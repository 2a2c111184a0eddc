"""Uniform access to diffusion LMs: the embedded model and real checkpoints.

The engine talks to a :class:`DiffusionLM`. It hides three differences:

* the embedded model supports the dual KV cache; LLaDA and Dream checkpoints
  loaded through ``trust_remote_code`` do not expose it, so the engine falls
  back to recompute-every-step for them;
* mask ids differ (LLaDA 126336, Dream 151666, ours from the tokenizer);
* Dream predicts token i from position i-1, so its logits shift right by one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch
from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

from .modeling import DiLaForMaskedDiffusion, KVCache

#: Known families: model_type (lower case) -> (mask id, logit shift).
KNOWN_FAMILIES = {"llada": (126336, False), "dream": (151666, True)}


class CheckpointError(ValueError):
    """A checkpoint path that cannot be loaded, with what to do about it."""


@dataclass
class DiffusionLM:
    """A loaded model plus the ids and capabilities the engine needs."""

    model: torch.nn.Module
    tokenizer: object
    mask_id: int
    eos_id: int
    pad_id: int
    max_context: int
    supports_cache: bool
    logit_shift: bool = False
    name: str = "model"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @torch.no_grad()
    def full(self, ids: torch.Tensor, attn: torch.Tensor, return_kv: bool,
             prompt_lengths: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, Optional[KVCache]]:
        """Recompute pass over whole canvases: logits (B, T, V) and optionally K/V.

        ``prompt_lengths`` (B,) lets the embedded model keep its prompt from attending
        to the response (``DiLaConfig.isolate_prompt``); other families ignore it.
        """
        if self.supports_cache:
            out = self.model(ids, attention_mask=attn, return_kv=return_kv, prompt_lengths=prompt_lengths)
            return out.logits, out.kv
        logits = self.model(input_ids=ids, attention_mask=attn.long()).logits
        if self.logit_shift:
            logits = torch.cat((logits[:, :1], logits[:, :-1]), dim=1)
        return logits, None

    @torch.no_grad()
    def block(self, ids, positions, past_kv: KVCache, past_mask) -> torch.Tensor:
        """Cache step over the current blocks only: logits (B, Lb, V)."""
        ones = torch.ones_like(ids, dtype=torch.bool)
        return self.model(ids, attention_mask=ones, position_ids=positions, past_kv=past_kv, past_mask=past_mask).logits


def _check_path(path: Path) -> None:
    if not path.is_dir():
        raise CheckpointError(
            f"checkpoint folder {str(path)!r} does not exist: pass a local folder made by save_pretrained "
            "(the embedded default lives in data/models/dila-tiny)"
        )
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{str(path)!r} has no config.json: it is not a Hugging Face checkpoint folder")


@dataclass(frozen=True)
class CheckpointInfo:
    """What a front end needs from a checkpoint without loading its weights."""

    tokenizer: object
    mask_id: int
    eos_id: int
    pad_id: int
    max_context: int
    supports_cache: bool
    name: str
    #: ``llada`` or ``dream`` for those families, else None.
    family: Optional[str] = None


def describe_checkpoint(path: str | Path) -> CheckpointInfo:
    """Tokenizer, special ids and context limit of a checkpoint folder (weights untouched)."""
    import dilaserve.model  # noqa: F401  registers the embedded model with Auto classes

    path = Path(path)
    _check_path(path)
    try:
        raw = json.loads((path / "config.json").read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}/config.json is not valid JSON ({e}): the checkpoint is corrupt") from e
    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True, local_files_only=True)
        cfg = AutoConfig.from_pretrained(path, trust_remote_code=True, local_files_only=True)
    except Exception as e:
        raise CheckpointError(f"could not read checkpoint {str(path)!r}: {type(e).__name__}: {e}") from e
    model_type = str(raw.get("model_type", "")).lower()
    family = next((f for f in KNOWN_FAMILIES if f in model_type), None)
    if model_type == "dila":
        mask_id = cfg.mask_token_id
    elif family is not None:
        mask_id = KNOWN_FAMILIES[family][0]
    elif tok.mask_token_id is not None:
        mask_id = tok.mask_token_id
    else:
        raise CheckpointError(f"{path}: tokenizer has no mask token, so it cannot denoise")
    eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    max_ctx = int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "max_sequence_length", 4096))
    return CheckpointInfo(tok, int(mask_id), int(eos), int(pad), max_ctx, model_type == "dila", path.name, family)


def load_diffusion_lm(path: str | Path, device: str = "cpu", dtype: Optional[torch.dtype] = None) -> DiffusionLM:
    """Load a checkpoint folder: the embedded model, LLaDA, Dream, or any HF masked LM.

    Never touches a model hub: ``path`` must be a local folder.
    """
    info = describe_checkpoint(path)
    path = Path(path)
    try:
        if info.supports_cache:
            model = DiLaForMaskedDiffusion.from_pretrained(path, local_files_only=True)
        elif info.family is not None:
            model = AutoModel.from_pretrained(path, trust_remote_code=True, local_files_only=True, torch_dtype=dtype)
        else:
            # A generic masked LM (used by tests with a tiny random model).
            model = AutoModelForMaskedLM.from_pretrained(path, local_files_only=True, torch_dtype=dtype)
    except Exception as e:  # corrupt weights, missing files, unsupported architecture
        raise CheckpointError(f"could not load checkpoint {str(path)!r}: {type(e).__name__}: {e}") from e
    model.eval().to(device)
    if dtype is not None:
        model.to(dtype)
    return DiffusionLM(
        model=model, tokenizer=info.tokenizer, mask_id=info.mask_id, eos_id=info.eos_id, pad_id=info.pad_id,
        max_context=info.max_context, supports_cache=info.supports_cache, logit_shift=KNOWN_FAMILIES.get(info.family, (0, False))[1],
        name=info.name,
    )
