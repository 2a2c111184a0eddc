"""What the serving app (``notebooks/serve_app.py``) offers, sends and shows, kept out of the
notebook so that tests can drive it without a browser.

- the quality floor is bounded by the candidate thresholds the running server reports;
- each submitted prompt is sent once: restarting the server does not send it again, and
  stopping the server keeps the last answer on the page;
- an answer shows the server's ``finish_reason`` ("stop": it ended; "length": the canvas
  filled), says when ``max tokens`` was too short for an example's answer, is graded against
  the expected answer when the prompt is one of the examples, and an empty answer or a word
  the model's vocabulary lacks is said in words;
- the live metrics are rounded, and the SLO attainment waits for a finished request.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from dilaserve.serve.client import Completion
from dilaserve.tasks import TASKS, TaskInstance, Verdict, task_suite
from dilaserve.utils.display import rounded


# ---------------------------------------------------------------- the quality floor
def default_candidates() -> list[float]:
    """The server's candidate thresholds when it does not report them (its own default)."""
    from dilaserve.serve.config import ServeConfig

    return sorted(ServeConfig().thresholds)


def candidates_from_health(health: dict | None) -> list[float]:
    """The candidate thresholds from a ``/health`` body; the server's default set when the
    body has none (an older server) or is not a list of numbers."""
    values = (health or {}).get("thresholds")
    if isinstance(values, list) and values and all(isinstance(v, (int, float)) and 0 < v <= 1 for v in values):
        return sorted(float(v) for v in values)
    return default_candidates()


def floor_steps(candidates: list[float]) -> list[float]:
    """Values the quality-floor slider may take: no floor (0), then each candidate. A floor
    above the highest candidate would only earn an HTTP 400."""
    return [0.0] + sorted(set(float(c) for c in candidates))


# ---------------------------------------------------------------- example prompts
def example_prompts(per_task: int = 2, seed: int = 0) -> dict[str, TaskInstance]:
    """Example instances keyed by their prompt (which already starts with the task's name)."""
    return {inst.prompt: inst for inst in task_suite(per_task, seed=seed)}


def unknown_words(prompt: str, vocabulary: set[str]) -> list[str]:
    """Words of ``prompt`` (split on whitespace, as the tokenizer does) the model does not know."""
    return list(dict.fromkeys(w for w in prompt.split() if w not in vocabulary))


def checkpoint_vocabulary(checkpoint: Path) -> set[str]:
    """The word-level vocabulary in a checkpoint's ``tokenizer.json`` (empty if unreadable)."""
    try:
        return set(json.loads((Path(checkpoint) / "tokenizer.json").read_text())["model"]["vocab"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()


# ---------------------------------------------------------------- sending once
@dataclass(frozen=True)
class PromptRequest:
    """One submission of the form."""

    prompt: str
    slo_ms: float
    max_tokens: int
    min_threshold: float = 0.0
    priority: int = 0

    @classmethod
    def from_form(cls, value: dict) -> PromptRequest:
        return cls(
            str(value["prompt"]),
            float(value["slo_ms"]),
            int(value["max_tokens"]),
            float(value.get("min_threshold") or 0.0),
            int(value.get("priority") or 0),
        )


@dataclass(frozen=True)
class Exchange:
    """A request and what came back: a reply or an error message."""

    request: PromptRequest
    reply: Completion | None = None
    error: str | None = None
    server_url: str | None = None


@dataclass
class Outbox:
    """Each submission is sent at most once.

    The form's ``on_change`` calls :meth:`submit`; the cell that sends calls :meth:`take`,
    which hands a submission out once. That cell also re-runs when the server starts or
    stops; :meth:`take` then returns None and the page keeps showing :attr:`last`.
    """

    pending: PromptRequest | None = None
    last: Exchange | None = None
    submissions: int = field(default=0)

    def submit(self, request: PromptRequest | None) -> None:
        if request is not None:
            self.pending = request
            self.submissions += 1

    def take(self) -> PromptRequest | None:
        request, self.pending = self.pending, None
        return request

    def record(self, exchange: Exchange) -> Exchange:
        self.last = exchange
        return exchange


NOT_STARTED = "Start the server first (**start / stop the server**), then send the prompt again."


def send_pending(outbox: Outbox, server_url: str | None, send) -> Exchange | None:
    """Send the pending submission, if any, with ``send(url, request) -> Completion``.

    Returns the exchange to show: the new one, or the last one when nothing is pending. A
    submission made while the server is stopped is dropped with :data:`NOT_STARTED`, and not
    sent later by itself: the last answer stays what :attr:`Outbox.last` holds.
    """
    request = outbox.take()
    if request is None:
        return outbox.last
    if server_url is None:
        return Exchange(request, error=NOT_STARTED)
    try:
        return outbox.record(Exchange(request, reply=send(server_url, request), server_url=server_url))
    except Exception as e:  # HTTP errors and refused requests are shown, not raised
        return outbox.record(Exchange(request, error=str(e), server_url=server_url))


# ---------------------------------------------------------------- describing an answer
EMPTY_ANSWER = (
    "_(empty answer: the model wrote end-of-text straight away. It knows only the task "
    "language; pick an example prompt.)_"
)


def answer_text(text: str) -> str:
    """The answer as markdown; an empty one is said in words, not shown as empty quotes."""
    return f"`{text}`" if text.strip() else EMPTY_ANSWER


def finish_note(finish_reason: str | None, max_tokens: int) -> str | None:
    """What ``finish_reason`` means for the person reading the answer (None if unknown)."""
    if finish_reason == "length":
        return (
            f"**Cut off:** the canvas of {max_tokens} tokens filled before the answer ended; raise "
            "**max tokens** and send again."
        )
    if finish_reason == "stop":
        return "The answer ended (finish reason `stop`)."
    if finish_reason:
        return f"Finish reason `{finish_reason}`."
    return None


def canvas_note(request: PromptRequest, inst: TaskInstance | None, block_length: int | None = None) -> str | None:
    """A warning when ``max tokens`` leaves less room than the example's answer needs.

    The model sees its canvas and ends early rather than run off it, so a short canvas often
    comes back with finish reason "stop" and some items missing: only the known answer
    length can tell. ``block_length`` defaults to the server's (the canvas is whole blocks).
    """
    if inst is None:
        return None
    if block_length is None:
        from dilaserve.serve.config import ServeConfig

        block_length = ServeConfig().block_length
    canvas = block_length * math.ceil(request.max_tokens / block_length)
    if canvas >= inst.gen_length:
        return None
    return (
        f"**Canvas too short:** this answer needs {inst.answer_length} tokens and an end-of-text, "
        f"{inst.gen_length} in whole blocks of {block_length}; max tokens {request.max_tokens} gives "
        f"{canvas}, so the model ended early. Send it with max tokens {inst.gen_length}."
    )


def example_for(prompt: str, examples: dict[str, TaskInstance]) -> TaskInstance | None:
    """The example whose prompt this is (spaces normalised), if any."""
    return examples.get(" ".join(prompt.split()))


def grade(prompt: str, text: str, examples: dict[str, TaskInstance]) -> Verdict | None:
    """The verdict when ``prompt`` is one of ``examples`` (whose answers are known); else None."""
    inst = example_for(prompt, examples)
    return TASKS[inst.task].verdict(inst, text) if inst is not None else None


def step_axis(n_steps: int) -> tuple[tuple[float, float], list[int]]:
    """x-limits and whole-number ticks for a plot over denoising steps 1..n."""
    n = max(1, int(n_steps))
    stride = max(1, math.ceil(n / 12))
    return (0.5, n + 0.5), list(range(1, n + 1, stride))


# ---------------------------------------------------------------- the live metrics
def metric_rows(metrics: dict[str, float]) -> list[dict]:
    """Rows for the metrics table: counters, gauges and sums, rounded. Histogram buckets
    would drown the table, and ``*_created`` are the unix times the series were created."""
    return [
        {"metric": k, "value": rounded(float(v))}
        for k, v in sorted(metrics.items())
        if "_bucket" not in k and not k.split("{")[0].endswith("_created")
    ]


def finished_requests(metrics: dict[str, float]) -> int:
    return int(metrics.get('dilaserve:requests_total{status="finished"}', 0))


def attainment_text(metrics: dict[str, float]) -> str:
    """The SLO attainment as a percentage, or a dash until a request has finished."""
    if finished_requests(metrics) == 0:
        return "-"
    return f"{100 * metrics.get('dilaserve:slo_attainment', 0.0):.0f}%"
