"""OpenAI-compatible request and response schemas, plus DiLaServe's extensions.

Extension fields on a request: ``slo_ms`` (a latency budget) or ``deadline``
(absolute unix seconds), ``priority`` (higher is capped last under load) and
``min_threshold`` (a quality floor). Responses report the denoising steps and
the thresholds used under ``dilaserve``.
"""

from __future__ import annotations

import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Request(BaseModel):
    # Unknown OpenAI fields (temperature, top_p, user, ...) are accepted and ignored:
    # denoising here is greedy and the threshold plays the role of the sampler.
    # JSON's 1e999 parses to infinity (and Python's json reads NaN): every number must be finite.
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    model: str
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="most tokens to generate: the answer ends at the model's EOS (finish_reason stop) or here (length)",
    )
    stream: bool = False
    n: int = Field(default=1, ge=1, le=1, description="only n=1 is supported")
    slo_ms: float | None = Field(default=None, gt=0, description="latency budget in milliseconds")
    deadline: float | None = Field(default=None, gt=0, description="absolute deadline, unix seconds")
    priority: int = Field(default=0, ge=-100, le=100)
    min_threshold: float = Field(default=0.0, ge=0.0, le=1.0, description="quality floor for the threshold")

    @field_validator("slo_ms", "deadline", mode="before")
    @classmethod
    def _numeric(cls, v):
        # Reject "500" and True rather than coercing them: an SLO must be a number.
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ValueError("must be a number")
        return v


class CompletionRequest(_Request):
    prompt: str | list[str]

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v):
        if isinstance(v, list):
            if len(v) != 1:
                raise ValueError("send exactly one prompt per request")
            v = v[0]
        if not v.strip():
            raise ValueError("the prompt is empty")
        return v


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


class ChatCompletionRequest(_Request):
    messages: list[ChatMessage] = Field(min_length=1)

    @property
    def prompt(self) -> str:
        """The embedded model has no chat template: it answers the last user message."""
        users = [m.content for m in self.messages if m.role == "user"]
        return users[-1] if users else self.messages[-1].content


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
