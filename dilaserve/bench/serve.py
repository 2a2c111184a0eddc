"""``python -m dilaserve.bench serve``: load a running server like vLLM's ``bench serve``.

    python -m dilaserve.bench serve --base-url http://127.0.0.1:8000 --dataset tasks \\
        --num-prompts 64 --request-rate 8 --burstiness 1.0 --slo-ms 3000 --json

or launch the server(s) itself and compare policies under the same load in one run:

    python -m dilaserve.bench serve --launch dilaserve infaas --num-prompts 64 --request-rate 8 --json

Datasets: ``tasks`` (the synthetic task suite, graded), ``sharegpt`` (first-turn prompts,
truncated to the model's context) and ``trace`` (prompt/output lengths from the Azure
conversation trace, scaled into the model's context). Arrivals are a gamma process
(``--burstiness`` 1.0 is Poisson). Reports SLO attainment, mean / median / P99 end-to-end
latency, throughput and graded accuracy; the last line is one JSON object. A server started
with an API key is sent the one in ``DILASERVE_API_KEY``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from dilaserve.bench.common import emit, machine_info
from dilaserve.serve.client import auth_headers
from dilaserve.sim.arrivals import gamma_arrivals
from dilaserve.tasks import TASKS, TaskInstance, task_suite

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Prompt:
    text: str
    max_tokens: int
    instance: TaskInstance | None = None


@dataclass
class Outcome:
    ok: bool
    status: int
    latency_s: float
    slo_met: bool
    correct: bool | None
    completion_tokens: int
    steps: int
    mean_threshold: float


def load_prompts(dataset: str, n: int, seed: int, context: int = 256) -> list[Prompt]:
    rng = random.Random(seed)
    if dataset == "tasks":
        suite = task_suite(math.ceil(n / len(TASKS)), seed=seed)
        rng.shuffle(suite)
        return [Prompt(i.prompt, i.gen_length, i) for i in suite[:n]]
    if dataset == "sharegpt":
        data = json.loads((REPO / "data/sharegpt/ShareGPT_V3_filtered_500.json").read_text())
        texts = [c["conversations"][0]["value"] for c in data]
        return [Prompt(" ".join(t.split()[: context // 2]), 64) for t in rng.sample(texts, min(n, len(texts)))]
    if dataset == "trace":
        from dilaserve.sim.traces import load_trace

        tr = load_trace()
        idx = [rng.randrange(len(tr.prompt_tokens)) for _ in range(n)]
        scale = (context / 2) / float(np.percentile(tr.prompt_tokens + tr.output_tokens, 99))
        out = []
        for i in idx:
            p = max(1, int(tr.prompt_tokens[i] * scale))
            o = max(1, min(context // 2, int(tr.output_tokens[i] * scale)))
            out.append(Prompt("list : " + " ".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(p)), o))
        return out
    raise ValueError(f"unknown dataset {dataset!r}: choose tasks, sharegpt or trace")


async def run_load(
    base_url: str, model: str, prompts: list[Prompt], rate: float, burstiness: float, slo_ms: float, seed: int
) -> tuple[list[Outcome], float]:
    rng = np.random.default_rng(seed)
    if math.isinf(rate):
        offsets = np.zeros(len(prompts))
    else:
        offsets = gamma_arrivals(rate, 10 * len(prompts) / rate + 10, rng, burstiness)[: len(prompts)]

    async def one(client: httpx.AsyncClient, p: Prompt, at: float) -> Outcome:
        await asyncio.sleep(at)
        t0 = time.perf_counter()
        try:
            r = await client.post(
                "/v1/completions", json={"model": model, "prompt": p.text, "max_tokens": p.max_tokens, "slo_ms": slo_ms}
            )
        except httpx.HTTPError:
            return Outcome(False, 0, time.perf_counter() - t0, False, False if p.instance else None, 0, 0, 0.0)
        lat = time.perf_counter() - t0
        if r.status_code != 200:
            return Outcome(False, r.status_code, lat, False, False if p.instance else None, 0, 0, 0.0)
        body = r.json()
        info, text = body["dilaserve"], body["choices"][0]["text"]
        correct = TASKS[p.instance.task].grade(p.instance, text) if p.instance else None
        thr = info["thresholds"]
        return Outcome(
            True,
            200,
            lat,
            lat * 1000 <= slo_ms,
            correct,
            body["usage"]["completion_tokens"],
            info["steps"],
            float(np.mean(thr)) if thr else 0.0,
        )

    limits = httpx.Limits(max_connections=1000)
    async with httpx.AsyncClient(base_url=base_url, timeout=600, limits=limits, headers=auth_headers()) as client:
        start = time.perf_counter()
        outcomes = await asyncio.gather(*(one(client, p, float(at)) for p, at in zip(prompts, offsets)))
        return list(outcomes), time.perf_counter() - start


def summarise(outcomes: list[Outcome], wall_s: float) -> dict:
    lat = np.array([o.latency_s for o in outcomes if o.ok])
    graded = [o.correct for o in outcomes if o.correct is not None]
    ok = [o for o in outcomes if o.ok]
    return {
        "completed": len(ok),
        "failed": len(outcomes) - len(ok),
        "errors": {
            str(s): sum(1 for o in outcomes if not o.ok and o.status == s)
            for s in sorted({o.status for o in outcomes if not o.ok})
        },
        # a failed request counts as a missed SLO
        "slo_attainment": round(sum(o.slo_met for o in outcomes) / len(outcomes), 4),
        "mean_latency_s": round(float(lat.mean()), 4) if lat.size else None,
        "median_latency_s": round(float(np.median(lat)), 4) if lat.size else None,
        "p99_latency_s": round(float(np.percentile(lat, 99)), 4) if lat.size else None,
        "throughput_rps": round(len(ok) / wall_s, 3),
        "output_tokens_per_s": round(sum(o.completion_tokens for o in ok) / wall_s, 2),
        "accuracy": round(sum(graded) / len(graded), 4) if graded else None,
        # on time and correct, over every request sent (refused and failed ones count 0)
        "goodput": round(sum(bool(o.slo_met and o.correct) for o in outcomes) / len(outcomes), 4) if graded else None,
        "mean_steps": round(float(np.mean([o.steps for o in ok])), 2) if ok else None,
        "mean_threshold": round(float(np.mean([o.mean_threshold for o in ok])), 4) if ok else None,
        "duration_s": round(wall_s, 2),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.bench serve",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--base-url", default="http://127.0.0.1:8000", help="server to load (ignored with --launch)")
    p.add_argument("--launch", nargs="+", metavar="POLICY", help="start a local server per policy, load each in turn")
    p.add_argument("--server-args", default="", help="extra flags for launched servers")
    p.add_argument("--model", default=None, help="model name (default: the server's first model)")
    p.add_argument("--dataset", default="tasks", choices=["tasks", "sharegpt", "trace"])
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--request-rate", type=float, default=float("inf"), help="requests/s (inf: all at once)")
    p.add_argument("--burstiness", type=float, default=1.0, help="gamma shape of inter-arrival gaps (1.0 = Poisson)")
    p.add_argument("--slo-ms", type=float, default=5000.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    prompts = load_prompts(args.dataset, args.num_prompts, args.seed)
    common = {
        "dataset": args.dataset,
        "num_prompts": len(prompts),
        "request_rate": args.request_rate,
        "burstiness": args.burstiness,
        "slo_ms": args.slo_ms,
    }

    def bench(url: str) -> dict:
        model = args.model or httpx.get(url + "/v1/models", headers=auth_headers(), timeout=10).json()["data"][0]["id"]
        outcomes, wall = asyncio.run(
            run_load(url, model, prompts, args.request_rate, args.burstiness, args.slo_ms, args.seed)
        )
        return summarise(outcomes, wall)

    if not args.launch:
        result = {**common, **bench(args.base_url.rstrip("/"))}
    else:
        from dilaserve.serve.launcher import start_server

        result = {**common, "policies": {}}
        for policy in args.launch:
            # Raises with the end of the server's log if it exits or stays unhealthy.
            server = start_server(
                extra_args=["--policy", policy, "--log-level", "warning", *args.server_args.split()], timeout_s=300
            )
            try:
                result["policies"][policy] = bench(server.url)
            finally:
                server.stop()
    result["machine"] = machine_info()
    emit(result, args.json)
    return 0
