"""Prometheus metrics, named ``dilaserve:*`` like vLLM's ``vllm:*``.

Every series carries a ``model_name`` label (the served model), as vLLM's do, so that a
dashboard over several servers can tell them apart. No ``*_created`` series is exported:
read as a sample, ``dilaserve:requests_created`` looks like a count and is a unix time.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

disable_created_metrics()

THRESHOLD_BUCKETS = (0.45, 0.55, 0.65, 0.75, 0.85, 0.95, 1.0)
STEP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80)
TOKEN_BUCKETS = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class _ForModel:
    """A labelled metric with its ``model_name`` label already given: ``.labels(*rest)``."""

    def __init__(self, metric, model_name: str):
        self._metric, self._model = metric, model_name

    def labels(self, *values: str):
        return self._metric.labels(self._model, *values)


class ServeMetrics:
    """Every metric the server exports, on a private registry (tests start many servers)."""

    def __init__(self, model_name: str = "unknown") -> None:
        r = self.registry = CollectorRegistry()
        m = model_name

        def counter(name, doc, labels=()):
            c = Counter(name, doc, ["model_name", *labels], registry=r)
            return _ForModel(c, m) if labels else c.labels(m)

        def gauge(name, doc, labels=()):
            g = Gauge(name, doc, ["model_name", *labels], registry=r)
            return _ForModel(g, m) if labels else g.labels(m)

        def histogram(name, doc, buckets, labels=()):
            h = Histogram(name, doc, ["model_name", *labels], buckets=buckets, registry=r)
            return _ForModel(h, m) if labels else h.labels(m)

        self.running = gauge("dilaserve:num_requests_running", "requests placed on an instance")
        self.waiting = gauge("dilaserve:num_requests_waiting", "requests deferred: no instance has room")
        self.requests = counter("dilaserve:requests", "finished requests by outcome", ["status"])
        self.slo_met = counter("dilaserve:slo_met", "requests finished within their SLO")
        self.slo_attainment = gauge("dilaserve:slo_attainment", "share of finished requests that met their SLO")
        self.steps = histogram("dilaserve:request_steps", "denoising steps per finished request", STEP_BUCKETS)
        self.threshold = histogram("dilaserve:step_threshold", "threshold of each denoising step", THRESHOLD_BUCKETS)
        self.step_latency = histogram(
            "dilaserve:step_latency_seconds", "wall time of one batched step", LATENCY_BUCKETS, ["tp"]
        )
        self.e2e_latency = histogram("dilaserve:e2e_request_latency_seconds", "arrival to completion", REQUEST_BUCKETS)
        self.ttft = histogram(
            "dilaserve:time_to_first_token_seconds",
            "arrival to the first committed text (the first block a stream sends)",
            REQUEST_BUCKETS,
        )
        self.queue_time = histogram(
            "dilaserve:request_queue_time_seconds",
            "arrival to the request's first step on an instance",
            REQUEST_BUCKETS,
        )
        self.prompt_tokens = counter("dilaserve:prompt_tokens", "prompt tokens of admitted requests")
        self.generation_tokens = counter("dilaserve:generation_tokens", "answer tokens of finished requests")
        self.prompt_length = histogram(
            "dilaserve:request_prompt_tokens", "prompt tokens per admitted request", TOKEN_BUCKETS
        )
        self.generation_length = histogram(
            "dilaserve:request_generation_tokens", "answer tokens per finished request", TOKEN_BUCKETS
        )
        self.instances = gauge("dilaserve:instances", "ready instances by TP degree", ["tp"])
        self.migrations = counter("dilaserve:migrations", "requests moved between instances")
        self.reconfigurations = counter("dilaserve:reconfigurations", "reconfiguration plans applied")
        self.instance_failures = counter(
            "dilaserve:instance_failures", "instances that died (replaced unless the server was shutting down)"
        )
        self.resumed = counter(
            "dilaserve:resumed_requests", "requests whose instance died; they resume elsewhere from their last state"
        )
        self.step_errors = counter("dilaserve:step_errors", "requests an instance's engine refused to step (retried)")
        self.rejected = counter(
            "dilaserve:rejected_requests",
            "requests refused, by reason (invalid_request, too_large, overloaded, slo, slo_infeasible, unavailable, "
            "unauthorized, media_type) "
            "and HTTP status code",
            ["reason", "code"],
        )
        self._finished = 0
        self._met = 0

    def record_finish(self, met: bool, steps: int, latency_s: float, tokens: int) -> None:
        self._finished += 1
        self._met += int(met)
        self.requests.labels("finished").inc()
        if met:
            self.slo_met.inc()
        self.slo_attainment.set(self._met / self._finished)
        self.steps.observe(steps)
        self.e2e_latency.observe(latency_s)
        self.generation_tokens.inc(tokens)
        self.generation_length.observe(tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
