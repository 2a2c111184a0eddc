"""``python -m dilaserve.bench soak --minutes N [--json]``: a steady load for N minutes; does
the server keep its memory, its requests and its latency?

It starts the default server in this process (as ``bench frontend`` does: the HTTP loop can
be probed) and sends task-suite prompts of mixed lengths, half of them streamed, as a
Poisson stream at ``--request-rate``, with the SLO-aware policy and its reconfiguration
ticks on. Every request ends as ``bench chaos`` classifies it: completed, an error the
server reported (e.g. a 429 under load), or lost.

Reported:

* ``rss_growth``: the growth of the server process's resident memory from the end of the
  warm-up (``--warmup-minutes``, default a tenth of the run) to the end, as a fraction
  (0.05 = 5%); ``rss_mb`` samples it once a minute. The instance workers (Ray processes)
  are reported apart (``worker_rss_growth``);
* ``lost``: requests that got no clean answer; ``completed`` and ``errors`` by status;
* ``p99_ms``: p99 latency of completed requests;
* ``loop_stall_ms_max``: the longest the HTTP event loop was held (a 5 ms sleeper's lateness).

Targets (20 minutes): ``lost`` = 0 and ``rss_growth`` <= 0.05.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections import Counter

import httpx
import numpy as np
import psutil

from dilaserve.bench.chaos import one_request
from dilaserve.bench.common import emit, machine_info
from dilaserve.bench.inprocess import InProcessServer, StallProbe
from dilaserve.bench.serve import load_prompts


def rss_bytes(proc: psutil.Process) -> int:
    return proc.memory_info().rss


def worker_rss_bytes(proc: psutil.Process) -> int:
    """Resident memory of the Ray processes this one started (workers, raylet, GCS)."""
    total = 0
    for child in proc.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            pass
    return total


async def soak(url: str, minutes: float, rate: float, seed: int, slo_ms: float, warmup_s: float) -> dict:
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    duration = minutes * 60.0
    offsets = np.cumsum(nprng.exponential(1.0 / rate, size=int(duration * rate * 1.5) + 10))
    offsets = offsets[offsets < duration]
    prompts = load_prompts("tasks", max(len(offsets), 1), seed)
    model = httpx.get(url + "/v1/models", timeout=10).json()["data"][0]["id"]
    proc = psutil.Process()
    samples: list[tuple[float, int, int]] = []

    async def sample_memory() -> None:
        start = time.monotonic()
        marks = sorted({warmup_s, *np.arange(60.0, duration, 60.0), duration})
        for mark in marks:
            # No gc.collect() here: a full collection in this process holds the GIL, and the
            # server's HTTP loop with it, for as long as it runs (it would be measured as a stall).
            await asyncio.sleep(max(0.0, mark - (time.monotonic() - start)))
            samples.append((round(time.monotonic() - start, 1), rss_bytes(proc), worker_rss_bytes(proc)))

    limits = httpx.Limits(max_connections=500, max_keepalive_connections=100)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as c:
        memory = asyncio.create_task(sample_memory())
        results = await asyncio.gather(
            *(
                one_request(c, model, prompts[i % len(prompts)], rng.random() < 0.5, float(at), slo_ms)
                for i, at in enumerate(offsets)
            )
        )
        await memory
    return {"results": results, "samples": samples}


def growth(start: int, end: int) -> float | None:
    return round((end - start) / start, 4) if start else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.bench soak", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--minutes", type=float, default=20.0, help="how long the load runs")
    p.add_argument("--warmup-minutes", type=float, default=None, help="memory baseline time (default: a tenth)")
    p.add_argument("--request-rate", type=float, default=2.0, help="mean arrivals per second (Poisson)")
    p.add_argument("--slo-ms", type=float, default=60000.0, help="SLO of every request")
    p.add_argument("--reconfig-interval-s", type=float, default=60.0, help="the server's reconfiguration ticks")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args(argv)
    if args.minutes <= 0 or args.request_rate <= 0:
        p.error("--minutes and --request-rate must be positive")
    warmup_s = 60.0 * (args.warmup_minutes if args.warmup_minutes is not None else args.minutes / 10)
    if not 0 <= warmup_s < args.minutes * 60:
        p.error("--warmup-minutes must be shorter than --minutes")
    server = InProcessServer(
        artifacts=tempfile.mkdtemp(prefix="no-artifacts-"),
        reconfig_interval_s=args.reconfig_interval_s,
        log_level="warning",
    ).start()
    try:
        probe = StallProbe(server.runtime.loop)
        t0 = time.perf_counter()
        out = asyncio.run(soak(server.url, args.minutes, args.request_rate, args.seed, args.slo_ms, warmup_s))
        wall = time.perf_counter() - t0
        stalls = probe.take()
        probe.stop()
        in_flight_after = server.runtime.core.call(lambda: server.runtime.scheduler.in_flight).result(timeout=30)
        outcomes_kept = server.runtime.core.call(lambda: len(server.runtime.scheduler.outcomes)).result(timeout=30)
    finally:
        server.stop()
    results, samples = out["results"], out["samples"]
    completed = [r for r in results if r.kind == "completed"]
    lat = np.array([r.latency_s for r in completed])
    base = next((s for s in samples if s[0] >= warmup_s - 1), samples[0])
    end = samples[-1]
    result = {
        "minutes": args.minutes,
        "requests": len(results),
        "completed": len(completed),
        "lost": sum(r.kind == "lost" for r in results),
        "errors": dict(sorted(Counter(str(r.status) for r in results if r.kind == "error").items())),
        "p99_ms": round(float(np.percentile(lat, 99)) * 1000, 1) if lat.size else None,
        "p50_ms": round(float(np.percentile(lat, 50)) * 1000, 1) if lat.size else None,
        "rss_growth": growth(base[1], end[1]),
        "worker_rss_growth": growth(base[2], end[2]),
        "rss_mb": [[t, round(r / 2**20, 1)] for t, r, _ in samples],
        "worker_rss_mb": [[t, round(w / 2**20, 1)] for t, _, w in samples],
        "loop_stall_ms_max": round(max(stalls) * 1000, 1) if stalls else None,
        "loop_stall_worst_at_s": probe.worst[0],
        "loop_stall_ms_p99": round(float(np.percentile(stalls, 99)) * 1000, 1) if stalls else None,
        "in_flight_after": in_flight_after,
        "scheduler_outcomes_kept": outcomes_kept,
        "lost_examples": [r.detail for r in results if r.kind == "lost"][:5],
        "duration_s": round(wall, 1),
        "settings": {
            "request_rate": args.request_rate,
            "slo_ms": args.slo_ms,
            "warmup_s": warmup_s,
            "reconfig_interval_s": args.reconfig_interval_s,
            "seed": args.seed,
        },
        "machine": machine_info(),
    }
    emit(result, args.json)
    return 0
