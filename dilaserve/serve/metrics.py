"""Prometheus metrics, named ``dilaserve:*`` like vLLM's ``vllm:*``."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

THRESHOLD_BUCKETS = (0.45, 0.55, 0.65, 0.75, 0.85, 0.95, 1.0)
STEP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class ServeMetrics:
    """Every metric the server exports, on a private registry (tests start many servers)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.running = Gauge("dilaserve:num_requests_running", "requests placed on an instance", registry=r)
        self.waiting = Gauge("dilaserve:num_requests_waiting", "requests deferred: no instance has room", registry=r)
        self.requests = Counter("dilaserve:requests", "finished requests by outcome", ["status"], registry=r)
        self.slo_met = Counter("dilaserve:slo_met", "requests finished within their SLO", registry=r)
        self.slo_attainment = Gauge(
            "dilaserve:slo_attainment", "share of finished requests that met their SLO", registry=r
        )
        self.steps = Histogram(
            "dilaserve:request_steps", "denoising steps per finished request", buckets=STEP_BUCKETS, registry=r
        )
        self.threshold = Histogram(
            "dilaserve:step_threshold", "threshold of each denoising step", buckets=THRESHOLD_BUCKETS, registry=r
        )
        self.step_latency = Histogram(
            "dilaserve:step_latency_seconds",
            "wall time of one batched step",
            ["tp"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.e2e_latency = Histogram(
            "dilaserve:e2e_request_latency_seconds",
            "arrival to completion",
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80),
            registry=r,
        )
        self.instances = Gauge("dilaserve:instances", "ready instances by TP degree", ["tp"], registry=r)
        self.migrations = Counter("dilaserve:migrations", "requests moved between instances", registry=r)
        self.reconfigurations = Counter("dilaserve:reconfigurations", "reconfiguration plans applied", registry=r)
        self.instance_failures = Counter(
            "dilaserve:instance_failures", "instances that died and were replaced", registry=r
        )
        self.step_errors = Counter(
            "dilaserve:step_errors", "requests an instance's engine refused to step (retried)", registry=r
        )
        self.rejected = Counter(
            "dilaserve:rejected_requests", "requests refused before scheduling", ["reason"], registry=r
        )
        self._finished = 0
        self._met = 0

    def record_finish(self, met: bool, steps: int, latency_s: float) -> None:
        self._finished += 1
        self._met += int(met)
        self.requests.labels("finished").inc()
        if met:
            self.slo_met.inc()
        self.slo_attainment.set(self._met / self._finished)
        self.steps.observe(steps)
        self.e2e_latency.observe(latency_s)

    def render(self) -> bytes:
        return generate_latest(self.registry)
