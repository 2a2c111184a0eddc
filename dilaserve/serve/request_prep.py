"""A request's checks and tokenisation, before it reaches the engine core.

:class:`RequestPreparer` reads only the tokenizer and the config, never the scheduler, so
the API runs it off the event loop for a large body. Every refusal is a
:class:`~dilaserve.serve.errors.BadRequest` naming the field to change.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from dilaserve.model.adapters import CheckpointInfo

from .config import ServeConfig
from .errors import BadRequest


@dataclass(frozen=True)
class PreparedRequest:
    """A request checked and tokenised by :meth:`RequestPreparer.prepare`, ready to submit."""

    ids: list[int]
    gen_length: int
    max_tokens: int | None
    slo_s: float
    slo_field: str  # the field the SLO came from (slo_ms or deadline), for refusals
    priority: int = 0
    min_threshold: float = 0.0
    stops: tuple[str, ...] = ()


class RequestPreparer:
    """Checks and tokenises requests for the served checkpoint ``info`` under ``cfg``."""

    def __init__(self, cfg: ServeConfig, info: CheckpointInfo):
        self.cfg = cfg
        self.info = info

    def prepare(self, body) -> PreparedRequest:
        """Check and tokenise a parsed request (``protocol.CompletionRequest`` or chat); raises
        :class:`BadRequest` naming the field to change."""
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
