"""A small HTTP client for a running DiLaServe server: one completion, the ``/metrics`` scrape.

reply = complete(server.url, "list : c a f b", max_tokens=32, slo_ms=5000)
print(reply.text, reply.steps, reply.thresholds)
print(fetch_metrics(server.url)["dilaserve:slo_attainment"], health(server.url)["thresholds"])

Against a server with an API key, set ``DILASERVE_API_KEY`` for the client too.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import httpx

from .config import API_KEY_ENV

#: ``(pid, client)``: this process's connection pool (see :func:`_http`)
_pool: tuple[int, httpx.Client] | None = None
_pool_lock = threading.Lock()


def _http() -> httpx.Client:
    """One connection pool per process, shared by every call and thread (an ``httpx.Client``
    may be). ``httpx.post`` builds a client, and its TLS context, on every call: about 20 ms
    of CPU each, so a burst of 12 sent at once from threads took a quarter of a second of
    the cores the server steps on, and its first steps took 17 times their usual time. A
    forked child gets a pool of its own."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), httpx.Client(limits=httpx.Limits(max_connections=256, max_keepalive_connections=32)))
        return _pool[1]


@dataclass(frozen=True)
class Completion:
    """One answer, with what the server reports about how it was decoded."""

    text: str
    steps: int
    thresholds: list[float]
    latency_ms: float
    slo_ms: float
    slo_met: bool
    instances: list[str]
    #: "stop" (the answer ended) or "length" (the canvas filled first); None if not reported.
    finish_reason: str | None = None


def auth_headers() -> dict[str, str]:
    """The ``Authorization`` header for a server started with an API key, from the same
    ``DILASERVE_API_KEY`` variable the server reads (empty without one)."""
    key = os.environ.get(API_KEY_ENV)
    return {"Authorization": f"Bearer {key}"} if key else {}


def complete(
    url: str,
    prompt: str,
    max_tokens: int = 32,
    slo_ms: float | None = None,
    priority: int = 0,
    min_threshold: float = 0.0,
    model: str = "dila-tiny",
    timeout_s: float = 300.0,
) -> Completion:
    """POST ``/v1/completions`` and return the answer; raises ``RuntimeError`` with the
    server's error message on a non-200 reply."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": int(max_tokens),
        "priority": int(priority),
        "min_threshold": float(min_threshold),
    }
    if slo_ms:
        body["slo_ms"] = float(slo_ms)
    r = _http().post(url + "/v1/completions", json=body, headers=auth_headers(), timeout=timeout_s)
    if r.status_code != 200:
        try:
            msg = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            msg = r.text
        raise RuntimeError(f"HTTP {r.status_code}: {msg}")
    return parse_completion(r.json())


def parse_completion(body: dict) -> Completion:
    """A ``/v1/completions`` body as a :class:`Completion`. ``finish_reason`` is read
    defensively: a server that does not report it gives None."""
    info, choice = body["dilaserve"], body["choices"][0]
    return Completion(
        choice["text"],
        int(info["steps"]),
        list(info["thresholds"]),
        float(info["latency_ms"]),
        float(info["slo_ms"]),
        bool(info["slo_met"]),
        list(info["instances"]),
        choice.get("finish_reason"),
    )


def health(url: str, timeout_s: float = 5.0) -> dict | None:
    """The ``/health`` body (model, policy, candidate thresholds, ...), or None if the server
    is not healthy (ok or degraded) or unreachable, or what answers is not a server's JSON."""
    try:
        r = _http().get(url + "/health", timeout=timeout_s)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def answers_health(url: str, timeout_s: float = 2.0) -> bool:
    """Whether ``/health`` answers (a start-up poll)."""
    return health(url, timeout_s) is not None


def fetch_metrics(
    url: str, prefix: str = "dilaserve:", drop_labels: tuple[str, ...] = ("model_name",)
) -> dict[str, float]:
    """Scrape ``/metrics``: every sample whose name starts with ``prefix``, keyed by name
    plus labels (``dilaserve:instances{tp="1"}``), less ``drop_labels`` (one server serves
    one model: its ``model_name`` label tells nothing apart here)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = _http().get(url + "/metrics", timeout=5).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.startswith(prefix):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()) if k not in drop_labels)
            out[s.name + (f"{{{labels}}}" if labels else "")] = float(s.value)
    return out
