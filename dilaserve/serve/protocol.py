"""OpenAI-compatible request and response schemas, plus DiLaServe's extensions.

Extension fields on a request: ``slo_ms`` (a latency budget) or ``deadline``
(absolute unix seconds; not both), ``priority`` (higher is capped last under load) and
``min_threshold`` (a quality floor). Responses report the denoising steps and
the thresholds used under ``dilaserve``.

The schemas are strict, so that a request is either served as written or refused with
the field to change: a boolean or a string is not a number, a field this server does not
know is a 400 naming it (as OpenAI's own "Unrecognized request argument"), and every
sampling field the OpenAI API defines is either honoured or refused. Decoding is greedy
(the denoising threshold plays the sampler's role), so ``temperature`` must be 0,
``top_p`` 1 and the penalties 0; ``seed`` is accepted, since a greedy decode gives the same
answer for every seed. ``stop`` and ``max_completion_tokens`` are honoured; ``n`` > 1,
``logprobs`` and ``echo`` are refused. Text may not hold control characters (tab, newline
and carriage return aside) or unpaired UTF-16 surrogates: a tokenizer cannot read them.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from .errors import BadRequest

#: Characters no prompt may hold: C0/C1 controls other than tab, newline and carriage return,
#: and surrogates (``json.loads`` pairs a valid ``\\ud83c\\udf89``, so any left is unpaired).
_BAD_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")

#: At most this many stop strings, as OpenAI allows.
MAX_STOP = 4


def check_text(text: str) -> str:
    """``text`` unchanged, or a ``ValueError`` saying which character is unreadable and where."""
    m = _BAD_TEXT.search(text)
    if m is None:
        return text
    ch, at = m.group(), m.start()
    if "\ud800" <= ch <= "\udfff":
        raise ValueError(
            f"holds an unpaired UTF-16 surrogate (U+{ord(ch):04X}) at character {at}: send valid Unicode text"
        )
    raise ValueError(
        f"holds the control character U+{ord(ch):04X} at character {at}: remove it "
        "(only tab, newline and carriage return are allowed)"
    )


def _refuse_unless(value, allowed: tuple, why: str):
    if value is not None and value not in allowed:
        raise ValueError(why)
    return value


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    #: The final chunk always carries the usage; the flag is accepted for the SDK's sake.
    include_usage: bool | None = None


class _Request(BaseModel):
    # JSON's 1e999 parses to infinity (and Python's json reads NaN): every number must be finite.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    model: str
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="most tokens to generate: the answer ends at the model's EOS (finish_reason stop) or here (length)",
    )
    max_completion_tokens: int | None = Field(
        default=None, ge=1, description="the current OpenAI name of max_tokens; send one, or both with one value"
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = Field(
        default=None, description=f"up to {MAX_STOP} strings; the answer ends before the first one it holds"
    )
    n: int = Field(default=1, description="only n=1 is supported")
    temperature: float | None = Field(default=None, description="only 0 (greedy decoding) is supported")
    top_p: float | None = Field(default=None, description="only 1 is supported")
    presence_penalty: float | None = Field(default=None, description="only 0 is supported")
    frequency_penalty: float | None = Field(default=None, description="only 0 is supported")
    logit_bias: dict[str, float] | None = Field(default=None, description="only an empty map is supported")
    seed: int | None = Field(default=None, description="accepted: greedy decoding gives one answer for every seed")
    user: str | None = Field(default=None, description="an end-user id; it does not change the answer")
    slo_ms: float | None = Field(default=None, gt=0, description="latency budget in milliseconds")
    deadline: float | None = Field(default=None, gt=0, description="absolute deadline, unix seconds")
    priority: int = Field(default=0, ge=-100, le=100)
    min_threshold: float = Field(default=0.0, ge=0.0, le=1.0, description="quality floor for the threshold")

    @field_validator("deadline")
    @classmethod
    def _one_slo(cls, v, info: ValidationInfo):
        if v is not None and info.data.get("slo_ms") is not None:
            raise ValueError("is set with slo_ms: send one of them (slo_ms, a budget in ms, or deadline, a unix time)")
        return v

    @field_validator("max_completion_tokens")
    @classmethod
    def _one_limit(cls, v, info: ValidationInfo):
        other = info.data.get("max_tokens")
        if v is not None and other is not None and v != other:
            raise ValueError(f"is {v} but max_tokens is {other}: send one of them (or both with one value)")
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v):
        stops = [v] if isinstance(v, str) else v
        if stops is not None:
            if len(stops) > MAX_STOP:
                raise ValueError(f"holds {len(stops)} strings; send at most {MAX_STOP}")
            for s in stops:
                if not s:
                    raise ValueError("holds an empty string: every stop string needs at least one character")
                check_text(s)
        return v

    @field_validator("n")
    @classmethod
    def _n(cls, v):
        return _refuse_unless(v, (1,), f"n={v}: only n=1 is served; send {v} requests instead")

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v):
        why = "only greedy decoding is served (the denoising threshold plays the sampler's role): send 0 or omit it"
        return _refuse_unless(v, (0,), why)

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, v):
        return _refuse_unless(v, (1,), "only greedy decoding is served: send top_p 1 or omit it")

    @field_validator("presence_penalty", "frequency_penalty")
    @classmethod
    def _penalty(cls, v):
        return _refuse_unless(v, (0,), "penalties are not supported: send 0 or omit it")

    @field_validator("logit_bias")
    @classmethod
    def _logit_bias(cls, v):
        if v:
            raise ValueError("logit biases are not supported: send {} or omit it")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v):
        return check_text(v) if v is not None else v

    @property
    def answer_limit(self) -> int | None:
        """The most answer tokens asked for, under either name."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def limit_field(self) -> str:
        """The name the client used for the limit (for error messages)."""
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"

    @property
    def stop_strings(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


class CompletionRequest(_Request):
    prompt: str | list[str]
    #: Where the prompt is in the request, for errors about it.
    prompt_field: ClassVar[str] = "prompt"
    logprobs: int | None = Field(default=None, description="not supported: omit it")
    echo: bool = Field(default=False, description="not supported: omit it or send false")
    best_of: int | None = Field(default=None, description="only 1 is supported")
    suffix: str | None = Field(default=None, description="not supported: omit it")

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list):
            if len(v) != 1:
                raise ValueError("send exactly one prompt per request")
            v = v[0]
        if not v.strip():
            raise ValueError("the prompt is empty")
        return check_text(v)

    @field_validator("logprobs")
    @classmethod
    def _logprobs(cls, v):
        return _refuse_unless(v, (), "log probabilities are not reported by this server: omit logprobs")

    @field_validator("echo")
    @classmethod
    def _echo(cls, v):
        return _refuse_unless(v, (False,), "echoing the prompt is not supported: omit echo or send false")

    @field_validator("best_of")
    @classmethod
    def _best_of(cls, v):
        return _refuse_unless(v, (1,), "only best_of=1 is served: omit it")

    @field_validator("suffix")
    @classmethod
    def _suffix(cls, v):
        return _refuse_unless(v, (), "insertion (a suffix) is not supported: omit suffix")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "developer", "user", "assistant"]
    content: str
    name: str | None = None

    @field_validator("content")
    @classmethod
    def _content(cls, v):
        return check_text(v)


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)
    logprobs: bool | None = Field(default=None, description="not supported: omit it or send false")
    top_logprobs: int | None = Field(default=None, description="not supported: omit it")

    @field_validator("messages")
    @classmethod
    def _a_user_message(cls, v):
        if not any(m.role == "user" for m in v):
            raise ValueError("holds no user message: the model answers the last user message, so send one")
        return v

    @field_validator("logprobs")
    @classmethod
    def _logprobs(cls, v):
        return _refuse_unless(v, (False,), "log probabilities are not reported by this server: omit logprobs")

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs(cls, v):
        return _refuse_unless(v, (0,), "log probabilities are not reported by this server: omit top_logprobs")

    @property
    def _prompt_index(self) -> int:
        return max(i for i, m in enumerate(self.messages) if m.role == "user")  # validated: there is one

    @property
    def prompt(self) -> str:
        """The embedded model has no chat template: it answers the last user message."""
        return self.messages[self._prompt_index].content

    @property
    def prompt_field(self) -> str:
        """Where the prompt is in the request, for errors about it."""
        return f"messages.{self._prompt_index}.content"


# ---------------------------------------------------------------- parsing a body
def _param(loc: tuple) -> str | None:
    """The request field a pydantic error location names, as a dotted path
    (``messages.0.content``), without the union-member tags pydantic adds (``list[str]``)."""
    parts = [str(p) for p in loc if isinstance(p, int) or p in _FIELD_NAMES]
    return ".".join(parts) or None


def _describe(e: ValidationError) -> BadRequest:
    first = e.errors()[0]
    loc, kind, msg = tuple(first.get("loc", ())), first.get("type"), first.get("msg", "invalid value")
    param = _param(loc)
    if kind == "extra_forbidden":
        param = ".".join(str(p) for p in loc)
        return BadRequest(
            f"unknown field {param!r}: this server does not know it; remove it (the fields it knows are in /openapi.json)",
            param,
        )
    msg = msg.removeprefix("Value error, ")
    if kind == "missing":
        msg = "is required"
    return BadRequest(f"{param}: {msg}" if param else msg, param)


def parse_request(raw: bytes, cls: type[_Request]) -> _Request:
    """The request in ``raw`` (a JSON body), or a :class:`BadRequest` that names the field at
    fault, or says "request body" when the body itself is the problem."""
    if not raw.strip():
        raise BadRequest("the request body is empty: send a JSON object with the request's fields")
    try:
        data = json.loads(raw)
    except UnicodeDecodeError:
        raise BadRequest("the request body is not valid UTF-8 text: send JSON encoded as UTF-8") from None
    except json.JSONDecodeError as e:
        raise BadRequest(f"the request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise BadRequest("the request body is nested too deeply: send a flat JSON object") from None
    if not isinstance(data, dict):
        raise BadRequest(f"the request body must be a JSON object, not a JSON {type(data).__name__}")
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        raise _describe(e) from None


_FIELD_NAMES = (
    set(CompletionRequest.model_fields) | set(ChatCompletionRequest.model_fields) | set(ChatMessage.model_fields)
)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class DecodeInfo(BaseModel):
    """How the answer was produced (DiLaServe extension)."""

    steps: int
    thresholds: list[float]
    latency_ms: float
    slo_ms: float
    slo_met: bool
    instances: list[str] = []


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def error_body(
    message: str, type_: str = "invalid_request_error", param: str | None = None, code: int | None = None
) -> dict:
    """An OpenAI-style error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
