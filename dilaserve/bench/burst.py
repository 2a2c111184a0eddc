"""``python -m dilaserve.bench burst [--quick] [--hog] [--json]``: a burst after a quiet
spell; does control keep out of the steps' way, and does admission keep its promises?

It starts the server in this process with the pipeline's artifacts (``--artifacts``) and
the default policy, so the operating-point tuner is on and replays in its worker process.
It sends a quiet stream (``--quiet-rps`` for ``--quiet-s``; short under ``--quick``), then
``--burst`` requests at once, each with ``--slo-ms``. ``--hog`` starts one busy-loop
process per core beside it, as a loaded machine. The clients run in a process of their own,
as clients do: in the server's process they took its interpreter lock, and under the hog
their own work added up to 5 s to a burst request's latency that no server could see. The
burst's requests are built before its clock starts and sent at once by a lean sender
(:mod:`dilaserve.bench.lean_client`), each on its own connection, all timed from the
burst's start.

The server's tuner (:class:`~dilaserve.schedule.tuner.TunerConfig`) tunes every 60 s on a
60-s window of at least 40 sampled arrivals: a quick run's 30 quiet arrivals never reach
that, and its burst would find control idle. Under ``--quick`` the tuner is
:data:`QUICK_TUNER` (every 10 s on a 30-s window, from 5 sampled arrivals), so that its
replays run during the quiet spell and the burst (``--default-tuner`` keeps the default);
the JSON's ``settings`` say which.

Reported:

* ``max_step_gap_s``: the longest time with requests waiting and no step finishing
  (sampled every 20 ms from the engine core's last finished step);
* ``burst_p50_ms``, ``burst_p99_ms``: latency of the burst's completed requests;
* ``slo_met_admitted``: the share of the burst's admitted (not refused) requests that met
  their SLO, timed by the client; ``slo_met_admitted_server``: the same, timed by the
  server from when each request reached it; ``refused`` by reason (HTTP status and the
  server's message);
* ``control_cpu_share``: the control worker's CPU seconds over the run's wall seconds;
* ``health``: the ``/health`` statuses seen (sampled every 0.5 s), with their counts;
* ``step_time_factors``: what the control plane learned of the machine's step time;
* ``tunings``: ``[seconds since the run began, point]`` of every operating point the tuner
  adopted (a point kept counts too), so a run shows what its replays chose and when.

Targets (``--quick``, idle machine): ``max_step_gap_s`` <= 1.0, ``slo_met_admitted`` >= 0.9,
``control_cpu_share`` <= 0.1; with ``--hog``: ``max_step_gap_s`` <= 2.0 and
``slo_met_admitted`` >= 0.85.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor

import httpx
import numpy as np

from dilaserve.bench.chaos import Result, one_request, plain_result
from dilaserve.bench.common import emit, machine_info
from dilaserve.bench.inprocess import InProcessServer
from dilaserve.bench.lean_client import Reply, encode_post, send_at_once
from dilaserve.bench.serve import load_prompts
from dilaserve.schedule.tuner import TunerConfig
from dilaserve.serve.client import auth_headers

#: The tuner of a quick run: its quiet spell (30 arrivals, a quarter of them sampled) is
#: enough to tune on, every 10 s, so the burst meets control at work.
QUICK_TUNER = TunerConfig(interval_s=10.0, window_s=30.0, min_arrivals=5)


def _spin() -> None:
    while True:
        pass


class GapProbe:
    """A thread that samples how long the engine core has gone without a finished step
    while requests wait."""

    def __init__(self, runtime, every_s: float = 0.02):
        self.runtime, self.every_s = runtime, every_s
        self.max_gap_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gap-probe", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        since = None
        while not self._stop.wait(self.every_s):
            now = time.monotonic()
            if not self.runtime.handles:
                since = None
                continue
            since = now if since is None else since
            last = self.runtime.core.last_step_at if self.runtime.core else None
            start = since if last is None else max(since, last)
            self.max_gap_s = max(self.max_gap_s, now - start)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join(timeout=5)
        return self.max_gap_s


async def _health(url: str, seen: Counter, stop: asyncio.Event) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=5) as c:
        while not stop.is_set():
            try:
                r = await c.get("/health")
                seen[f"{r.status_code} {r.json().get('status', '?')}"] += 1
            except (httpx.HTTPError, ValueError):
                seen["unreachable"] += 1
            await asyncio.sleep(0.5)


def _result(reply: Reply) -> Result:
    """How a burst request ended: no answer, or an answer that is not a completion, is lost."""
    try:
        if reply.status:
            return plain_result(reply.status, reply.text, reply.latency_s)
    except (json.JSONDecodeError, KeyError, IndexError, TypeError):
        pass
    return Result("lost", reply.status, reply.latency_s, False, detail=reply.text[:200])


def _drive_in_process(url: str, model: str, args) -> tuple[list, Counter]:
    """:func:`_drive` in this (the clients') process."""
    return asyncio.run(_drive(url, model, args))


async def _drive(url: str, model: str, args) -> tuple[list, Counter]:
    quiet_n = int(args.quiet_s * args.quiet_rps)
    prompts = load_prompts("tasks", quiet_n + args.burst, args.seed)
    rng = np.random.default_rng(args.seed)
    gaps = rng.exponential(1.0 / args.quiet_rps, quiet_n) if quiet_n else np.array([])
    at = np.cumsum(gaps)
    seen: Counter = Counter()
    stop = asyncio.Event()
    limits = httpx.Limits(max_connections=args.burst + 16)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as c:
        health = asyncio.create_task(_health(url, seen, stop))
        quiet = [one_request(c, model, p, False, float(t), args.slo_ms) for p, t in zip(prompts, at)]
        await asyncio.gather(*quiet)
        # Built before the clock starts, then sent at once by the lean sender (an httpx client
        # starved by --hog put some on the wire seconds late: lean_client's docstring).
        slo = {"deadline": time.time() + args.slo_ms / 1000} if args.deadline else {"slo_ms": args.slo_ms}
        body = lambda p: {"model": model, "prompt": p.text, "max_tokens": p.max_tokens, **slo}  # noqa: E731
        raw = [encode_post(url, "/v1/completions", body(p), auth_headers()) for p in prompts[quiet_n:]]
        results = [_result(r) for r in await send_at_once(url, raw)]
        stop.set()
        await health
    return results, seen


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.bench burst",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="a short quiet spell (30 s instead of 180 s)")
    p.add_argument("--hog", action="store_true", help="one busy-loop process per core beside the server")
    p.add_argument("--burst", type=int, default=300, help="requests sent at once after the quiet spell")
    p.add_argument("--quiet-s", type=float, default=None, help="seconds of quiet traffic (default 180, 30 quick)")
    p.add_argument("--quiet-rps", type=float, default=1.0, help="arrivals per second in the quiet spell")
    p.add_argument("--slo-ms", type=float, default=10000.0, help="the SLO of every request")
    p.add_argument(
        "--deadline",
        action="store_true",
        help="the burst's requests carry their SLO as an absolute deadline (unix time) rather than slo_ms, "
        "so the server also counts the time before it sees them",
    )
    p.add_argument("--artifacts", default="data/artifacts", help="the pipeline's artifacts (the tuner replays them)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--default-tuner",
        action="store_true",
        help="keep the server's default tuner under --quick (it then never tunes on the quick quiet spell)",
    )
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    args = p.parse_args(argv)
    if args.quiet_s is None:
        args.quiet_s = 30.0 if args.quick else 180.0
    if args.burst < 1 or args.quiet_s < 0 or args.quiet_rps <= 0 or args.slo_ms <= 0:
        p.error("--burst must be >= 1, --quiet-s >= 0, and --quiet-rps and --slo-ms positive")
    hogs = [mp.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)] if args.hog else []
    tuner = QUICK_TUNER if args.quick and not args.default_tuner else TunerConfig()
    server = InProcessServer(artifacts=args.artifacts, log_level="warning", tuner=tuner).start()
    for h in hogs:
        h.start()
    try:
        probe = GapProbe(server.runtime)
        t0 = time.perf_counter()
        clock0 = server.runtime.core.backend.clock()
        model = server.runtime.model_name
        with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as clients:
            results, health = clients.submit(_drive_in_process, server.url, model, args).result()
        wall = time.perf_counter() - t0
        max_gap = probe.stop()
        sched = server.runtime.scheduler
        stats = server.runtime.core.call(lambda: sched.tuner.worker.stats() if sched.tuner else None).result(60)
        learned = server.runtime.core.call(lambda: dict(sched.step_time.factors) if sched.step_time else {}).result(60)
        tunings = server.runtime.core.call(lambda: list(sched.tuner.records) if sched.tuner else []).result(60)
    finally:
        for h in hogs:
            h.kill()
        server.stop()
    done = [r for r in results if r.kind == "completed"]
    refused = [r for r in results if r.kind == "error"]
    admitted = [r for r in results if not (r.kind == "error" and r.status == 429)]
    lat = np.array([r.latency_s for r in done])
    met = sum(r.kind == "completed" and r.latency_s * 1000 <= args.slo_ms for r in admitted)
    met_server = sum(r.kind == "completed" and bool(r.server_slo_met) for r in admitted)
    result = {
        "max_step_gap_s": round(max_gap, 3),
        "burst_p50_ms": round(float(np.percentile(lat, 50)) * 1000, 1) if lat.size else None,
        "burst_p99_ms": round(float(np.percentile(lat, 99)) * 1000, 1) if lat.size else None,
        "slo_met_admitted": round(met / len(admitted), 4) if admitted else None,
        "slo_met_admitted_server": round(met_server / len(admitted), 4) if admitted else None,
        "burst": len(results),
        "completed": len(done),
        "refused": dict(Counter(f"{r.status} {r.detail[:80]}".strip() for r in refused)),
        "lost": sum(r.kind == "lost" for r in results),
        "control_cpu_share": round(stats.cpu_s / wall, 4) if stats else None,
        "control_jobs": stats.jobs if stats else 0,
        "control_dropped": stats.dropped if stats else 0,
        "control_skipped": stats.skipped if stats else 0,
        "health": dict(health),
        # measured over profiled step time per TP degree and step kind (step-time calibration)
        "step_time_factors": {f"TP-{tp} {kind.value}": round(f, 2) for (tp, kind), f in sorted(learned.items())},
        "tunings": [[round(r.time - clock0, 1), r.point] for r in tunings],
        "wall_s": round(wall, 1),
        "settings": {
            **{k: getattr(args, k) for k in ("quick", "hog", "burst", "quiet_s", "quiet_rps", "slo_ms", "deadline")},
            "tuner": {k: getattr(tuner, k) for k in ("interval_s", "window_s", "min_arrivals", "sample")},
        },
        "machine": machine_info(),
    }
    emit(result, args.json)
    return 0
