"""Uniform access to diffusion LMs: the embedded model, LLaDA, Dream and other masked LMs.

The engine talks to a :class:`DiffusionLM`. It hides the differences:

* the embedded model and the native LLaDA / Dream modules (``native.py``, read from the
  published folder by ``checkpoint.py``) support the dual KV cache; any other masked LM
  loads through ``AutoModelForMaskedLM`` and is decoded recompute-every-step;
* mask ids differ (LLaDA 126336, Dream 151666, ours from the tokenizer);
* Dream predicts token i from position i-1, so its logits shift right by one, and a
  cache step feeds it the token before the block too (see :attr:`DiffusionLM.lead`);
* an embedded checkpoint with ``block_causal`` is a block-diffusion model: its requests
  keep an exact cache across blocks (docs/architecture.md, "Block-diffusion models").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer

from .attention import check_positions
from .checkpoint import CheckpointError, family_of, load_native, read_config
from .modeling import DiLaForMaskedDiffusion, KVCache
from .native import NativeDiffusionLM

__all__ = ["CheckpointError", "CheckpointInfo", "DiffusionLM", "describe_checkpoint", "load_diffusion_lm"]


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
    #: ``llada`` / ``dream`` (native), ``dila`` (embedded), else the config's model_type.
    family: str = "unknown"
    #: Block diffusion (an embedded checkpoint with ``block_causal``): decoded in blocks of
    #: ``block_length`` tokens against an exact cache of the prompt and finished blocks.
    block_causal: bool = False
    #: The model's block length in block-causal mode (None: any block length).
    block_length: int | None = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def lead(self) -> int:
        """Tokens before the block that a cache step feeds too: Dream's logits for the
        block's first position come from the position before it."""
        return 1 if self.logit_shift else 0

    @torch.no_grad()
    def full(
        self,
        ids: torch.Tensor,
        attn: torch.Tensor,
        return_kv: bool,
        prompt_lengths: torch.Tensor | None = None,
        logit_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KVCache | None]:
        """Recompute pass over whole canvases: logits and optionally every layer's K/V.

        The logits are (B, T, V), or (B, P, V) at ``logit_positions`` (B, P) when given:
        the native models then run their head on those rows only. Dream's are shifted:
        position i gets the logits computed at i - 1 (position 0 keeps its own).
        ``prompt_lengths`` (B,) lets the embedded model keep its prompt from attending
        to the response (``DiLaConfig.isolate_prompt``); other families ignore it.
        """
        source = logit_positions
        if source is not None and self.logit_shift:
            source = (source - 1).clamp(min=0)
        native = isinstance(self.model, NativeDiffusionLM)
        if native:
            # the head runs on the ``source`` rows only, which already carry the shift
            out = self.model(ids, attention_mask=attn, return_kv=return_kv, logit_positions=source)
            logits, kv = out.logits, out.kv
        elif self.supports_cache:
            out = self.model(ids, attention_mask=attn, return_kv=return_kv, prompt_lengths=prompt_lengths)
            logits, kv = out.logits, out.kv
        else:
            logits, kv = self.model(input_ids=ids, attention_mask=attn.long()).logits, None
        if source is None:
            if self.logit_shift:
                logits = torch.cat((logits[:, :1], logits[:, :-1]), dim=1)
        elif not native:
            logits = logits.gather(1, source[..., None].expand(-1, -1, logits.shape[-1]))
        return logits, kv

    @torch.no_grad()
    def block(
        self,
        ids,
        positions,
        past_kv: KVCache,
        past_mask,
        logit_positions: torch.Tensor | None = None,
        prompt_lengths: torch.Tensor | None = None,
        write_rows: torch.Tensor | None = None,
        checked: bool = False,
    ) -> torch.Tensor:
        """Cache step over the current blocks: logits (B, Lb, V), or (B, P, V) at
        ``logit_positions`` (B, P), positions in the block, when given (the native models
        then run their head on those rows only).

        ``ids``/``positions`` (B, lead + Lb) start :attr:`lead` tokens before the block.
        A block-causal model may be fed more than the block (the finished block before it,
        whose exact K/V the step appends): ``logit_positions`` then count from the first
        fed token, and ``prompt_lengths`` (B,) place every key's block. ``past_kv`` is
        written in place (the fed positions' fresh K/V); ``write_rows`` (B,) marks the rows
        that may write (the others are a pooled step's padding).

        The positions are checked against the cache's length here, at the cost of one host
        synchronisation, unless ``checked`` says the caller did it on the host (the engine
        does, so that the step can be captured).
        """
        if not checked:
            check_positions(
                positions,
                past_kv[0][0].shape[2],
                "the cache",
                "a cache step needs the K/V of the whole canvas, block included",
            )
        ones = torch.ones_like(ids, dtype=torch.bool)
        # block position p reads the fed row p + lead, or the one before it where logits shift
        offset = self.lead - (1 if self.logit_shift else 0)
        if logit_positions is not None and isinstance(self.model, NativeDiffusionLM):
            return self.model(
                ids,
                attention_mask=ones,
                position_ids=positions,
                past_kv=past_kv,
                past_mask=past_mask,
                logit_positions=logit_positions + offset,
                write_rows=write_rows,
            ).logits
        extra = {"prompt_lengths": prompt_lengths} if self.block_causal else {}
        logits = self.model(
            ids,
            attention_mask=ones,
            position_ids=positions,
            past_kv=past_kv,
            past_mask=past_mask,
            write_rows=write_rows,
            **extra,
        ).logits
        logits = logits[:, offset : offset + ids.shape[1] - self.lead]
        if logit_positions is not None:
            logits = logits.gather(1, logit_positions[..., None].expand(-1, -1, logits.shape[-1]))
        return logits


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
    family: str | None = None
    #: An embedded block-diffusion checkpoint (``DiLaConfig.block_causal``).
    block_causal: bool = False
    #: Its block length (None: not block-causal).
    block_length: int | None = None


def describe_checkpoint(path: str | Path) -> CheckpointInfo:
    """Tokenizer, special ids and context limit of a checkpoint folder (weights untouched)."""
    import dilaserve.model  # noqa: F401  registers the embedded model with Auto classes

    path = Path(path)
    _check_path(path)
    raw = read_config(path)
    family = family_of(raw)
    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True, local_files_only=True)
        # the native families' configs are read by their own modules: a published folder
        # carries its config class as remote code, a tiny one made here does not
        cfg = (
            family.spec_from_config(raw)
            if family
            else AutoConfig.from_pretrained(path, trust_remote_code=True, local_files_only=True)
        )
    except Exception as e:
        raise CheckpointError(f"could not read checkpoint {str(path)!r}: {type(e).__name__}: {e}") from e
    model_type = str(raw.get("model_type", "")).lower()
    if model_type == "dila" or family is not None:
        mask_id = cfg.mask_token_id
    elif tok.mask_token_id is not None:
        mask_id = tok.mask_token_id
    else:
        raise CheckpointError(f"{path}: tokenizer has no mask token, so it cannot denoise")
    if family is not None:
        eos, pad = cfg.eos_token_id, cfg.pad_token_id
    else:
        eos = tok.eos_token_id if tok.eos_token_id is not None else tok.sep_token_id
        pad = tok.pad_token_id if tok.pad_token_id is not None else eos
    max_ctx = int(getattr(cfg, "max_position_embeddings", None) or getattr(cfg, "max_sequence_length", 4096))
    # only the embedded model has a block-causal mode; LLaDA, Dream and AutoModel stay bidirectional
    block_causal = model_type == "dila" and bool(getattr(cfg, "block_causal", False))
    return CheckpointInfo(
        tok,
        int(mask_id),
        int(eos),
        int(pad),
        max_ctx,
        model_type == "dila" or family is not None,
        path.name,
        family.name if family else None,
        block_causal,
        int(cfg.block_length) if block_causal else None,
    )


def load_diffusion_lm(path: str | Path, device: str = "cpu", dtype: torch.dtype | None = None) -> DiffusionLM:
    """Load a checkpoint folder: the embedded model, LLaDA, Dream, or any HF masked LM.

    Never touches a model hub: ``path`` must be a local folder. LLaDA and Dream run as
    native modules with the dual cache, in float32 on CPU and bfloat16 on GPU unless
    ``dtype`` says otherwise.
    """
    info = describe_checkpoint(path)
    path = Path(path)
    family = family_of(read_config(path))
    try:
        if family is not None:
            model = load_native(path, device=device, dtype=dtype)
        elif info.supports_cache:
            model = DiLaForMaskedDiffusion.from_pretrained(path, local_files_only=True)
        else:
            # A generic masked LM (used by tests with a tiny random model).
            model = AutoModelForMaskedLM.from_pretrained(path, local_files_only=True, torch_dtype=dtype)
    except CheckpointError:
        raise
    except Exception as e:  # corrupt weights, missing files, unsupported architecture
        raise CheckpointError(f"could not load checkpoint {str(path)!r}: {type(e).__name__}: {e}") from e
    model.eval().to(device)
    if dtype is not None:
        model.to(dtype)
    return DiffusionLM(
        model=model,
        tokenizer=info.tokenizer,
        mask_id=info.mask_id,
        eos_id=info.eos_id,
        pad_id=info.pad_id,
        max_context=info.max_context,
        supports_cache=info.supports_cache,
        logit_shift=bool(family and family.logit_shift),
        name=info.name,
        family=family.name if family else str(read_config(path).get("model_type", "unknown")).lower(),
        block_causal=info.block_causal,
        block_length=info.block_length,
    )
