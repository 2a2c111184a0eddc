"""``python -m dilaserve.bench frontend [--json]``: does the HTTP front end keep answering while
the control plane is busy and a huge body arrives?

It starts the default server in this process (uvicorn on a thread, the engine core on its
own; two TP-1 CPU instances of the embedded model), each reconfiguration solve made to take
at least ``--solve-s`` seconds of pure-Python CPU work on the engine core's thread (the worst
case for a shared GIL: a real solve waits on its solver's subprocess part of the time). Then
two phases of the same steady load: small completions as a Poisson stream at
``--request-rate`` and ``/health`` every 50 ms, for ``--phase-s`` seconds each; the second
phase also sends one ``--big-mb`` MB body at its start.

A reconfiguration tick comes every ``--reconfig-interval-s`` seconds of each phase, at the
same offsets in both: the bench posts the ticks to the engine core itself. A solve holds the
engine core, so a request that overlaps one waits up to ``--solve-s`` for its next step, and
those requests make each phase's p99. With the server's own tick timer the solves fell at
other offsets of the two phases' (identical) arrivals, and the difference of the p99s
measured where they fell, not the big body. One solve and one completion of each prompt
come before the phases, so that first-time work slows neither.

Reported:

* ``health_p99_ms``: p99 latency of ``/health`` in the phase with the big body;
* ``completion_p99_extra_ms``: p99 completion latency with the big body minus without it;
* ``loop_stall_ms_max``: the longest the HTTP event loop was held (a task that sleeps 5 ms
  and measures how late it wakes), over both phases;
* ``big_body_status``: how the big body was answered (413 under the default
  ``--max-request-bytes`` of 1 MiB; raise it with ``--max-request-bytes`` to make the server
  parse and tokenise it, off the loop) and ``solves``: the reconfiguration solves that ran;
* ``mean_steps``: the mean denoising steps of each phase's completions (the same requests:
  were they to differ, the latencies would too, whatever the big body did).

Targets: ``health_p99_ms`` <= 50, ``completion_p99_extra_ms`` <= 100, ``loop_stall_ms_max`` <= 50.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable

import httpx
import numpy as np

from dilaserve.bench.common import emit, machine_info
from dilaserve.bench.inprocess import InProcessServer, StallProbe
from dilaserve.schedule.events import ReconfigTick
from dilaserve.serve.runtime import ServingRuntime

#: The server's own reconfiguration timer, set out of the run's reach: the bench ticks.
NO_TIMER_S = 1e9

PROMPTS = ("list : c a f b", "pairs : a b c d", "list : e d c b a", "arith : + 1 - 1 : two three")


def slow_solves(runtime: ServingRuntime, solve_s: float) -> list[float]:
    """Make every reconfiguration solve take at least ``solve_s`` of CPU-bound Python on the
    engine core's thread; returns the list the solves' durations are appended to. The plan
    is dropped: the cluster stays as it is, so both phases run on the same instances."""
    durations: list[float] = []

    def patch() -> None:
        reconf = runtime.scheduler.reconfigurator
        original = reconf.propose

        def propose(now, existing):
            t0 = time.perf_counter()
            plan = original(now, existing)
            x = 0
            while time.perf_counter() - t0 < solve_s:
                x += 1  # holds the GIL between the interpreter's switches, as model building does
            durations.append(time.perf_counter() - t0)
            del plan
            return None

        reconf.propose = propose

    runtime.core.call(patch).result(timeout=30)
    return durations


def ticker(runtime: ServingRuntime) -> Callable[[], None]:
    """Post one reconfiguration tick to the engine core, as its own timer does."""

    def tick() -> None:
        runtime.scheduler.handle(ReconfigTick(runtime.backend.clock()))

    return lambda: runtime.core.call(tick)


def warm_up(url: str, model: str, tick: Callable[[], None], solves: list[float], timeout_s: float = 300) -> None:
    """One solve and one completion of each prompt before the phases: the first of each does
    first-time work (the solver's set-up, the instances' first steps), which would otherwise
    slow the first phase only."""
    seen = len(solves)
    tick()
    for prompt in PROMPTS:
        httpx.post(
            url + "/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 32}, timeout=timeout_s
        )
    deadline = time.monotonic() + timeout_s
    while len(solves) == seen and time.monotonic() < deadline:
        time.sleep(0.01)


async def _load(
    url: str,
    model: str,
    phase_s: float,
    rate: float,
    seed: int,
    big: bytes | None,
    tick: Callable[[], None],
    interval_s: float,
) -> dict:
    rng = np.random.default_rng(seed)
    offsets = np.cumsum(rng.exponential(1.0 / rate, size=int(phase_s * rate * 3) + 10))
    offsets = offsets[offsets < phase_s]
    completions: list[float] = []
    steps: list[int] = []
    health: list[float] = []
    statuses: dict[str, int] = {}
    big_status: list[int] = []
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with httpx.AsyncClient(base_url=url, timeout=300, limits=limits) as c:

        async def one(at: float, i: int) -> None:
            await asyncio.sleep(at)
            body = {"model": model, "prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": 32, "slo_ms": 600000}
            t0 = time.perf_counter()
            r = await c.post("/v1/completions", json=body)
            statuses[str(r.status_code)] = statuses.get(str(r.status_code), 0) + 1
            if r.status_code == 200:
                completions.append(time.perf_counter() - t0)
                steps.append(r.json()["dilaserve"]["steps"])

        async def probe_health() -> None:
            end = time.perf_counter() + phase_s
            while time.perf_counter() < end:
                t0 = time.perf_counter()
                await c.get("/health")
                health.append(time.perf_counter() - t0)
                await asyncio.sleep(0.05)

        async def send_big() -> None:
            await asyncio.sleep(0.5)
            async with httpx.AsyncClient(base_url=url, timeout=300) as big_client:
                r = await big_client.post("/v1/completions", content=big, headers={"content-type": "application/json"})
                big_status.append(r.status_code)

        async def ticks() -> None:
            start = time.perf_counter()
            for k in range(1, int(phase_s / interval_s) + 1):
                # against the phase's start, so the ticks do not drift from the arrivals
                await asyncio.sleep(max(0.0, start + k * interval_s - time.perf_counter()))
                if k * interval_s < phase_s:
                    tick()

        tasks = [one(float(at), i) for i, at in enumerate(offsets)] + [probe_health(), ticks()]
        if big is not None:
            tasks.append(send_big())
        await asyncio.gather(*tasks)
    return {
        "completions": completions,
        "steps": steps,
        "health": health,
        "statuses": statuses,
        "big_status": big_status,
    }


def big_body(model: str, mb: float) -> bytes:
    """A ``mb`` MB completion request of words the model knows."""
    words = "list : " + "a b c d " * int(mb * 2**20 / 8)
    return ('{"model": "%s", "max_tokens": 32, "prompt": "%s"}' % (model, words)).encode()  # noqa: UP031


def p99_ms(xs: list[float]) -> float | None:
    return round(float(np.percentile(xs, 99)) * 1000, 1) if xs else None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.bench frontend",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--phase-s", type=float, default=20.0, help="seconds of load per phase")
    p.add_argument("--request-rate", type=float, default=2.0, help="small completions per second (Poisson)")
    p.add_argument("--solve-s", type=float, default=2.0, help="least seconds each reconfiguration solve takes")
    p.add_argument("--reconfig-interval-s", type=float, default=4.0, help="seconds between reconfiguration ticks")
    p.add_argument("--big-mb", type=float, default=10.0, help="size of the one big body (MB)")
    p.add_argument("--max-request-bytes", type=int, default=None, help="the server's limit (default: its own)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args(argv)
    if args.phase_s <= 0 or args.request_rate <= 0 or args.solve_s < 0 or args.reconfig_interval_s <= 0:
        p.error("--phase-s, --request-rate and --reconfig-interval-s must be positive, --solve-s non-negative")
    if args.solve_s >= args.reconfig_interval_s:
        p.error("--solve-s must be shorter than --reconfig-interval-s (the ticks would queue behind the solves)")
    overrides = {
        "artifacts": tempfile.mkdtemp(prefix="no-artifacts-"),
        "reconfig_interval_s": NO_TIMER_S,
        "log_level": "warning",
    }
    if args.max_request_bytes is not None:
        overrides["max_request_bytes"] = args.max_request_bytes
    server = InProcessServer(**overrides).start()
    try:
        rt = server.runtime
        solves = slow_solves(rt, args.solve_s)
        # Built before the probe starts: making a 10 MB string is one C call that holds the
        # GIL for ~100 ms in this (the client's) thread, which the probe would count as the server's.
        body = big_body(rt.model_name, args.big_mb)
        tick = ticker(rt)
        warm_up(server.url, rt.model_name, tick, solves)
        probe = StallProbe(rt.loop)
        load = (server.url, rt.model_name, args.phase_s, args.request_rate, args.seed)
        base = asyncio.run(_load(*load, None, tick, args.reconfig_interval_s))
        stalls = probe.take()
        big = asyncio.run(_load(*load, body, tick, args.reconfig_interval_s))
        stalls += probe.take()
        probe.stop()
    finally:
        server.stop()
    base_p99, big_p99 = p99_ms(base["completions"]), p99_ms(big["completions"])
    result = {
        "health_p99_ms": p99_ms(big["health"]),
        "health_p99_ms_without_big_body": p99_ms(base["health"]),
        "completion_p99_ms": big_p99,
        "completion_p99_ms_without_big_body": base_p99,
        "completion_p99_extra_ms": round(big_p99 - base_p99, 1) if big_p99 is not None and base_p99 else None,
        "loop_stall_ms_max": round(max(stalls) * 1000, 1) if stalls else None,
        "loop_stall_worst_at_s": probe.worst[0],
        "loop_stall_ms_p99": round(float(np.percentile(stalls, 99)) * 1000, 1) if stalls else None,
        "big_body_status": big["big_status"][0] if big["big_status"] else None,
        "statuses": {"without_big_body": base["statuses"], "with_big_body": big["statuses"]},
        # the same requests in both phases: a difference here (the controller lowering its
        # thresholds) would move the latencies too
        "mean_steps": {
            "without_big_body": round(float(np.mean(base["steps"])), 2) if base["steps"] else None,
            "with_big_body": round(float(np.mean(big["steps"])), 2) if big["steps"] else None,
        },
        "solves": len(solves),
        "solve_s_min": round(min(solves), 2) if solves else None,
        "settings": {
            "phase_s": args.phase_s,
            "request_rate": args.request_rate,
            "solve_s": args.solve_s,
            "reconfig_interval_s": args.reconfig_interval_s,
            "big_mb": args.big_mb,
            "max_request_bytes": server.cfg.max_request_bytes,
            "switch_interval_ms": server.cfg.switch_interval_ms,
        },
        "machine": machine_info(),
    }
    emit(result, args.json)
    return 0
