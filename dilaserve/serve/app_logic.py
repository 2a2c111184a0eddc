"""What the serving app (``notebooks/serve_app.py``) offers, sends and shows, kept out of the
notebook so that tests can drive it without a browser.

- the quality floor is bounded by the candidate thresholds the running server reports;
- each submitted prompt is sent once: restarting the server does not send it again, and
  stopping the server keeps the last answer on the page;
- the form keeps what was last sent (SLO, floor, priority, and the prompt while the example
  is the same) when the server restarts and the form is rebuilt;
- an answer carries one note on how it ended (``finish_reason`` and, for an example, whether
  ``max tokens`` left room for its answer), is graded against the expected answer when the
  prompt is one of the examples, and an empty answer or a word the model's vocabulary lacks
  is said in words;
- the live metrics are rounded, and the SLO attainment reads the same in the card and the
  table: a dash until a request has finished, then a percentage.

The burst (several prompts at once, so that the controller has to act) is
:mod:`dilaserve.serve.app_burst`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
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
    #: The example prompt the form showed when this was sent (its prompt may be edited).
    example: str | None = None

    @classmethod
    def from_form(cls, value: dict, example: str | None = None) -> PromptRequest:
        return cls(
            str(value["prompt"]),
            float(value["slo_ms"]),
            int(value["max_tokens"]),
            float(value.get("min_threshold") or 0.0),
            int(value.get("priority") or 0),
            example,
        )


def form_defaults(latest: PromptRequest | None, inst: TaskInstance, floors: list[float]) -> dict:
    """The values the form starts from when it is (re)built: the example's prompt and canvas
    with the default SLO, no floor and priority 0 at first; after a submission, what was sent
    (the prompt and max tokens only while the example shown is the one it was made from, the
    floor snapped to one the running server accepts)."""
    values = {"prompt": inst.prompt, "slo_ms": 20_000.0, "max_tokens": inst.gen_length, "min_threshold": 0.0}
    values["priority"] = 0
    if latest is None:
        return values
    values.update(slo_ms=latest.slo_ms, priority=latest.priority)
    values["min_threshold"] = max((f for f in floors if f <= latest.min_threshold + 1e-9), default=0.0)
    if latest.example == inst.prompt:
        values.update(prompt=latest.prompt, max_tokens=latest.max_tokens)
    return values


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

    pending: object | None = None
    #: The last thing sent and its answer: an :class:`Exchange` (a :class:`Burst` for the burst form).
    last: object | None = None
    submissions: int = field(default=0)
    #: The latest submission, sent or not: what a rebuilt form starts from.
    latest: object | None = None

    def submit(self, request: object | None) -> None:
        if request is not None:
            self.pending = self.latest = request
            self.submissions += 1

    def take(self) -> object | None:
        request, self.pending = self.pending, None
        return request

    def record(self, exchange):
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


def _block_length(block_length: int | None) -> int:
    if block_length is None:
        from dilaserve.serve.config import ServeConfig

        block_length = ServeConfig().block_length
    return block_length


def ending_note(
    request: PromptRequest, finish_reason: str | None, inst: TaskInstance | None, block_length: int | None = None
) -> tuple[str, str] | None:
    """One note on how the answer ended, as ``(kind, markdown)`` with kind "warn" or "neutral";
    None when the server did not say.

    ``finish_reason`` "length" means the answer reached ``max tokens``; "stop" means the model
    wrote end-of-text. The model sees its canvas (``max tokens`` in whole blocks of
    ``block_length``) and ends early rather than run off it, so a short canvas often comes
    back as "stop" with items missing: for an example prompt the known answer length tells.
    """
    if finish_reason is None:
        return None
    bl = _block_length(block_length)
    canvas = bl * math.ceil(request.max_tokens / bl)
    short = inst is not None and (request.max_tokens < inst.answer_length or canvas < inst.gen_length)
    need = (
        f"this answer needs {inst.answer_length} tokens and an end-of-text ({inst.gen_length} in whole blocks of "
        f"{bl}): send it again with max tokens {inst.gen_length}."
        if inst is not None
        else "raise **max tokens** and send again."
    )
    if finish_reason == "length":
        return "warn", f"**Cut off** at max tokens {request.max_tokens} before the answer ended; {need}"
    if finish_reason == "stop" and short:
        return "warn", (
            f"**Ended early:** max tokens {request.max_tokens} gives a canvas of {canvas} tokens, so the model "
            f"wrote end-of-text with items missing; {need}"
        )
    if finish_reason == "stop":
        return "neutral", "The answer ended: the model wrote end-of-text (finish reason `stop`)."
    return "neutral", f"Finish reason `{finish_reason}`."


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
#: What a card or a table cell shows before there is anything to show.
NO_DATA = "\u2013"
ATTAINMENT = "dilaserve:slo_attainment"


def finished_requests(metrics: dict[str, float]) -> int:
    return int(metrics.get('dilaserve:requests_total{status="finished"}', 0))


def attainment_text(metrics: dict[str, float]) -> str:
    """The SLO attainment as a percentage, or :data:`NO_DATA` until a request has finished
    (the server's gauge reads 0 then, which is no attainment at all)."""
    if finished_requests(metrics) == 0:
        return NO_DATA
    return f"{100 * metrics.get(ATTAINMENT, 0.0):.0f}%"


def metric_rows(metrics: dict[str, float]) -> list[dict]:
    """Rows for the metrics table, as text: counters, gauges and sums rounded to four
    significant digits, the SLO attainment as the card shows it. Histogram buckets would
    drown the table, and ``*_created`` are the unix times the series were created."""
    return [
        {"metric": k, "value": attainment_text(metrics) if k == ATTAINMENT else f"{rounded(float(v)):,g}"}
        for k, v in sorted(metrics.items())
        if "_bucket" not in k and not k.split("{")[0].endswith("_created")
    ]


# ---------------------------------------------------------------- starting the server
#: What starting takes, measured: a Ray cluster, two model instances and, without pipeline
#: artifacts, a quick latency profile. About 20 s on 2 idle cores, 30 to 40 s on a loaded machine.
START_NOTE = "Starting the server: a Ray cluster and two CPU instances (20 to 40 s, longer on a busy machine)"


def wait_until_healthy(handle, timeout_s: float, tick: Callable[[float, str], None], poll_s: float = 1.0) -> bool:
    """Wait for a server started with ``wait=False``, calling ``tick(elapsed_s, last_log_line)``
    about every ``poll_s``: the progress a person sees while it starts. False if it died or
    ``timeout_s`` ran out."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if handle.healthy():
            return True
        if not handle.alive:
            return False
        tail = handle.log_tail(1).strip()
        tick(time.monotonic() - t0, tail)
        time.sleep(poll_s)
    return False


def port_choice(value: float | int | None) -> int | None:
    """The port field: 0 (or empty) lets the launcher pick a free port."""
    port = int(value or 0)
    if port and not 1024 <= port <= 65535:
        raise ValueError(f"port {port} is outside 1024-65535; pick one there, or 0 for any free port")
    return port or None
