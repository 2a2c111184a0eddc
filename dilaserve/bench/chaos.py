"""``python -m dilaserve.bench chaos [--json]``: requests in flight while instances die and the
cluster is reconfigured; nothing may be lost or answered twice.

It launches its own server on a free port (as ``bench serve --launch`` does) and sends
``--num-requests`` requests (default 300: task-suite prompts of mixed lengths, half of them
streamed) as a Poisson stream at ``--request-rate``. While they run it SIGKILLs ``--kills``
instance worker processes (default 3, by PID, at random moments of the send window) and asks
for one live reconfiguration (two TP-1 instances to one TP-2, through the server's admin API).

Every request ends in exactly one of three ways:

* ``completed``: a 200 with a whole answer (for a stream: its final chunk with a
  ``finish_reason`` and usage, then ``[DONE]``);
* ``errors``: an HTTP error with an OpenAI-style body (e.g. 429 under load), by status;
* ``lost``: anything else: a dropped connection, a timeout, a 5xx, a stream that stops early.

``duplicated`` counts requests answered more than once or whose stream repeated text: the
streamed words outnumber the completion tokens the final chunk reports (the embedded model's
tokenizer has one token per word), or a response id seen twice. ``kills`` counts the worker
processes killed; ``reconfigurations`` and ``instance_failures`` are read back from the
server's metrics (what it saw); ``p99_latency_s`` is over completed requests. Targets:
``lost`` = 0, ``duplicated`` = 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass

import httpx
import numpy as np

from dilaserve.bench.common import emit, machine_info
from dilaserve.bench.serve import Prompt, load_prompts
from dilaserve.serve.client import fetch_metrics
from dilaserve.serve.launcher import start_server
from dilaserve.sim.arrivals import gamma_arrivals


@dataclass
class Result:
    """How one request ended (see the module docstring)."""

    kind: str  # completed, error or lost
    status: int
    latency_s: float
    stream: bool
    response_id: str | None = None
    duplicated: bool = False
    detail: str = ""
    #: whether the server says it met the SLO, timed from when the request reached it
    #: (None: no answer said)
    server_slo_met: bool | None = None


async def pick_worker(c: httpx.AsyncClient, rng: random.Random, killed: set[int], wait_s: float = 60.0) -> int | None:
    """A worker PID of a random ready instance, from the admin API (``/admin/workers``), skipping
    instances with a ``killed`` worker (the server may not have noticed the death yet); waits
    (bounded) while none is left, e.g. the previous victim's replacement is still loading.
    Choosing the instance first keeps two kills off the two ranks of one TP-2 instance."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            pids = (await c.get("/admin/workers")).json().get("worker_pids") or {}
        except (httpx.HTTPError, ValueError):
            pids = {}
        live = [p for p in pids.values() if p and not killed.intersection(p)]
        if live:
            return rng.choice(rng.choice(live))
        await asyncio.sleep(0.1)
    return None


def failed_result(status: int, text: str, latency_s: float, stream: bool = False) -> Result:
    """A non-200 answer: a reported error if it is a 4xx or 503 with an OpenAI-style body
    (the server refused or gave up on the request and said so), else lost."""
    try:
        err = json.loads(text)["error"]
        clean = isinstance(err, dict) and bool(err.get("message")) and "type" in err
    except (ValueError, KeyError, TypeError):
        clean = False
    kind = "error" if clean and (status < 500 or status == 503) else "lost"
    return Result(kind, status, latency_s, stream, detail=text[:200])


def plain_result(status: int, text: str, latency_s: float) -> Result:
    """How a non-streamed completion ended, from its status and body."""
    if status != 200:
        return failed_result(status, text, latency_s)
    d = json.loads(text)
    choice = d["choices"][0]
    if choice.get("finish_reason") not in ("stop", "length"):
        return Result("lost", 200, latency_s, False, d.get("id"), detail=f"finish_reason {choice.get('finish_reason')}")
    dup = len(choice["text"].split()) > d["usage"]["completion_tokens"]
    met = (d.get("dilaserve") or {}).get("slo_met")
    return Result("completed", 200, latency_s, False, d["id"], dup, server_slo_met=met)


async def _plain(c: httpx.AsyncClient, body: dict) -> Result:
    t0 = time.perf_counter()
    r = await c.post("/v1/completions", json=body)
    lat = time.perf_counter() - t0
    return plain_result(r.status_code, r.text, lat)


async def _streamed(c: httpx.AsyncClient, body: dict) -> Result:
    t0 = time.perf_counter()
    async with c.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        if r.status_code != 200:
            await r.aread()
            return failed_result(r.status_code, r.text, time.perf_counter() - t0, True)
        words, final, done, rid, err = 0, None, False, None, None
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[6:]
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                err = chunk["error"]
                continue
            rid = chunk.get("id", rid)
            choice = chunk["choices"][0]
            words += len((choice.get("text") or "").split())
            if choice.get("finish_reason") is not None:
                final = chunk
    lat = time.perf_counter() - t0
    if err is not None and done:
        # an error after the stream began (e.g. the server shutting down): reported, not lost
        return Result("error", err.get("code") or 0, lat, True, rid, detail=err.get("message", ""))
    if not done or final is None:
        return Result("lost", 200, lat, True, rid, detail="stream ended without its final chunk and [DONE]")
    return Result("completed", 200, lat, True, rid, words > final["usage"]["completion_tokens"])


async def one_request(
    c: httpx.AsyncClient, model: str, p: Prompt, stream: bool, at: float, slo_ms: float, deadline: bool = False
) -> Result:
    """Send one request ``at`` seconds from now with an SLO of ``slo_ms`` (with ``deadline``,
    as the absolute time ``slo_ms`` after it is sent)."""
    await asyncio.sleep(at)
    body = {"model": model, "prompt": p.text, "max_tokens": p.max_tokens}
    body.update({"deadline": time.time() + slo_ms / 1000} if deadline else {"slo_ms": slo_ms})
    t0 = time.perf_counter()
    try:
        return await (_streamed(c, body) if stream else _plain(c, body))
    except (httpx.HTTPError, json.JSONDecodeError, KeyError) as e:
        return Result("lost", 0, time.perf_counter() - t0, stream, detail=f"{type(e).__name__}: {e}")


async def chaos(url: str, kill_at: list[float], reconfigure_at: float, rng: random.Random, log: list[dict]) -> None:
    """SIGKILL a worker of a random instance at each of ``kill_at`` (seconds from now) and ask for the
    reconfiguration at ``reconfigure_at``; what happened goes to ``log``."""
    t0 = time.monotonic()
    killed: set[int] = set()
    actions = sorted([(t, "kill") for t in kill_at] + [(reconfigure_at, "reconfigure")])
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        for at, what in actions:
            await asyncio.sleep(max(0.0, at - (time.monotonic() - t0)))
            if what == "kill":
                pid = await pick_worker(c, rng, killed)
                try:
                    if pid is None:
                        raise ProcessLookupError
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                    log.append({"t": round(time.monotonic() - t0, 2), "kill": pid})
                except ProcessLookupError:
                    log.append({"t": round(time.monotonic() - t0, 2), "kill": None})
            else:
                # Retried while a replacement is starting or a plan is still executing (409).
                for _ in range(100):
                    r = await c.post("/admin/reconfigure", json={"node_counts": [{"2": 1}]})
                    if r.status_code == 200:
                        break
                    await asyncio.sleep(0.2)
                log.append({"t": round(time.monotonic() - t0, 2), "reconfigure": r.status_code})


async def run(
    url: str, prompts: list[Prompt], rate: float, kills: int, seed: int, slo_ms: float
) -> tuple[list[Result], list[dict], float]:
    rng = random.Random(seed)
    offsets = gamma_arrivals(rate, 10 * len(prompts) / rate + 10, np.random.default_rng(seed))[: len(prompts)]
    window = float(offsets[-1])
    streams = [rng.random() < 0.5 for _ in prompts]
    # The faults fall inside the send window, after the first tenth (requests are in flight).
    kill_at = sorted(rng.uniform(0.1, 0.9) * window for _ in range(kills))
    reconfigure_at = rng.uniform(0.3, 0.7) * window
    log: list[dict] = []
    model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    limits = httpx.Limits(max_connections=len(prompts) + 10, max_keepalive_connections=len(prompts) + 10)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as c:
        start = time.perf_counter()
        faults = asyncio.create_task(chaos(url, kill_at, reconfigure_at, rng, log))
        results = await asyncio.gather(
            *(one_request(c, model, p, s, float(at), slo_ms) for p, s, at in zip(prompts, streams, offsets))
        )
        wall = time.perf_counter() - start
        await faults
    return list(results), log, wall


def summarise(results: list[Result], metrics: dict[str, float], log: list[dict], wall_s: float) -> dict:
    ids = Counter(r.response_id for r in results if r.response_id)
    completed = [r for r in results if r.kind == "completed"]
    lat = np.array([r.latency_s for r in completed])
    errors = Counter(str(r.status) for r in results if r.kind == "error")
    lost = [r for r in results if r.kind == "lost"]
    return {
        "requests": len(results),
        "completed": len(completed),
        "lost": len(lost),
        "duplicated": sum(r.duplicated for r in results) + sum(n - 1 for n in ids.values() if n > 1),
        "errors": dict(sorted(errors.items())),
        "kills": sum(1 for e in log if e.get("kill")),
        "reconfigurations": int(metrics.get("dilaserve:reconfigurations_total", 0)),
        "p99_latency_s": round(float(np.percentile(lat, 99)), 3) if lat.size else None,
        "streamed": sum(r.stream for r in results),
        # instances the server saw die (a kill that lands on an instance already being stopped
        # by the reconfiguration, or on the second rank of a dead TP-2 instance, adds none)
        "instance_failures": int(metrics.get("dilaserve:instance_failures_total", 0)),
        "faults": log,
        "lost_examples": [r.detail for r in lost[:5]],
        "duration_s": round(wall_s, 2),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.bench chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--num-requests", type=int, default=300, help="requests to send")
    p.add_argument(
        "--request-rate",
        type=float,
        default=4.0,
        help="mean arrivals per second (Poisson; the default keeps a 2-core host busy, not swamped)",
    )
    p.add_argument("--kills", type=int, default=3, help="instance worker processes to SIGKILL")
    p.add_argument(
        "--slo-ms",
        type=float,
        default=600000.0,
        help="SLO of every request (generous: the bench is about loss, not latency)",
    )
    p.add_argument("--server-args", default="", help="extra flags for the launched server")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args(argv)
    if args.num_requests < 1 or args.request_rate <= 0 or args.kills < 0:
        p.error("--num-requests must be at least 1, --request-rate positive and --kills non-negative")
    prompts = load_prompts("tasks", args.num_requests, args.seed)
    # Reconfiguration ticks off: the one live reconfiguration is the bench's own, through the
    # server's admin API.
    server = start_server(
        extra_args=["--reconfig-interval-s", "0", "--admin-api", "--log-level", "warning", *args.server_args.split()]
    )
    try:
        results, log, wall = asyncio.run(
            run(server.url, prompts, args.request_rate, args.kills, args.seed, args.slo_ms)
        )
        result = summarise(results, fetch_metrics(server.url), log, wall)
        result["healthy_after"] = server.healthy()
    finally:
        server.stop()
    result["settings"] = {
        "request_rate": args.request_rate,
        "slo_ms": args.slo_ms,
        "seed": args.seed,
        "server_args": args.server_args,
    }
    result["machine"] = machine_info()
    emit(result, args.json)
    return 0
