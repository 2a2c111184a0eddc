"""Server configuration, composed of the per-concern configs (vLLM style).

:class:`ServeConfig` holds what only the server has (model, address, cluster slots,
queue, drain) and, whole, the configs each concern already owns: threshold control
(:class:`~dilaserve.control.config.ControlConfig`), reconfiguration
(:class:`~dilaserve.reconfig.config.ReconfigConfig`), the workload monitor
(:class:`~dilaserve.reconfig.config.MonitorConfig`) and the scheduler
(:class:`~dilaserve.schedule.config.SchedulerConfig`) and each rank's engine
(:class:`~dilaserve.engine.config.EngineConfig`: its K/V pool's budget, CUDA graphs). Every field of each is a
documented ``--kebab-case`` flag (:mod:`dilaserve.utils.cli`), validated by the config
that owns it; only what the server fills from the pipeline's artifacts (the step law,
the tokens-per-step table) or from its own flags (the block length) is not a flag.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from dilaserve.control.config import ControlConfig
from dilaserve.engine import DEFAULT_CHECKPOINT
from dilaserve.engine.config import EngineConfig
from dilaserve.reconfig.config import MonitorConfig, ReconfigConfig
from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.control_worker import BudgetConfig
from dilaserve.schedule.tuner import TunerConfig
from dilaserve.utils.cli import nested, option

#: The environment variable the API key is read from when ``--api-key`` is not given.
API_KEY_ENV = "DILASERVE_API_KEY"

#: The server re-plans every minute by default (the class's 300 s suits hour-long traces).
SERVE_RECONFIG_INTERVAL_S = 60.0
#: Seconds of the new rate a rise's tuning replays on a server (``TunerConfig.rise_forecast_s``).
SERVE_RISE_FORECAST_S = 15.0
#: CPU-seconds the control budget saves up while quiet (``BudgetConfig.burst_s``): a few
#: tunings at the paper's scale (a tiered one replays in 1.5 to 9 s), so the rise that ends
#: a quiet spell is tuned at once (docs/architecture.md, "Control beside the step loop").
SERVE_CONTROL_BURST_S = 5.0

#: The server prices steps at the clipped mean of their measured over profiled time
#: (``--step-time-estimator mean``: a queue waits for the mean step; on a quiet machine the
#: slow tenth, ``--step-time-quantile 0.9``, turned away a third of a burst the median
#: served on time, and under a busy loop per core the median promised a burst steps four
#: times shorter than they were) and grows no batch past a 500-ms step on the calibrated
#: profile (``--max-step-ms``).
SERVE_STEP_TIME_QUANTILE = 0.5
SERVE_STEP_TIME_ESTIMATOR = "mean"
#: and holds a degree's factor at its highest of the last minute (``--step-time-hold-s``): a
#: quiet spell on a loaded machine runs its steps between the busy processes, at a few times
#: the profile, and the burst that follows runs at its share of a core, at fifty and more.
SERVE_STEP_TIME_HOLD_S = 60.0
SERVE_MAX_STEP_MS = 500.0


def reconfig_or_off(**fields) -> ReconfigConfig | None:
    """``--reconfig-interval-s 0`` switches reconfiguration off (no reconfigurator)."""
    return None if fields.get("interval_s") == 0 else ReconfigConfig(**fields)


@dataclass
class ServeConfig:
    """``python -m dilaserve.serve`` options."""

    model: str = option(
        str(DEFAULT_CHECKPOINT), "checkpoint folder to serve (default: the embedded model, data/models/dila-tiny)"
    )
    served_model_name: str | None = option(None, "model name in the API (default: the checkpoint folder's name)")
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "port to listen on")
    device: str = option("cpu", "cpu (instances use CPU slots, gloo) or cuda (GPUs, NCCL)")
    num_slots: int = option(2, "GPUs (or CPU slots with --device cpu) the cluster may use")
    slots_per_node: int = option(2, "GPUs (or CPU slots) per node; a TP group never spans nodes")
    tp_degrees: list[int] = option([1, 2], "tensor-parallel degrees reconfiguration may use")
    initial_tp: int = option(1, "TP degree of the instances launched at start (the cluster starts uniform)")
    default_slo_ms: float = option(20000.0, "SLO for requests that send neither slo_ms nor deadline")
    policy: str = option(
        "dilaserve", "scheduling policy: dilaserve, dilaserve-paper, infaas, llumnix, fixed@TAU or an ablation"
    )
    max_batch_tokens: int = option(4096, "tokens one instance may hold in its batch")
    max_queue: int = option(256, "requests in flight (running + waiting) before new ones get HTTP 429")
    max_request_bytes: int = option(
        2**20, "largest request body accepted (bytes); a larger one gets HTTP 413 without being parsed"
    )
    default_max_tokens: int = option(64, "generation length when a request sends no max_tokens")
    block_length: int = option(32, "denoising block length")
    artifacts: str = option("data/artifacts", "folder with the pipeline's predictor and latency profiles")
    ray_address: str | None = option(None, "join an existing Ray cluster (default: start a local one)")
    torch_threads: int = option(1, "intra-op threads per CPU worker")
    startup_timeout_s: float = option(
        300.0,
        "seconds an instance may take to start (Ray worker, imports, weights, TP group) before it counts "
        "as failed; raise it on a loaded or slow host, or for a large checkpoint",
    )
    drain_timeout_s: float = option(
        30.0, "on SIGINT/SIGTERM, wait this long for in-flight requests before failing them"
    )
    log_level: str = option("info", "logging level")
    api_key: str | None = option(
        None,
        "require this key on every /v1 route (and /admin), sent as OpenAI clients do: 'Authorization: "
        "Bearer KEY'; /health and /metrics stay open (default: the DILASERVE_API_KEY environment "
        "variable, else no key)",
    )
    stall_degraded_s: float = option(
        2.0,
        "/health answers 'degraded' (HTTP 200, with the reason) when requests wait and no step has "
        "finished for this many seconds: the step loop is held up; a step of a full batch takes well under a "
        "second on the embedded model (raise it for models whose steps take longer)",
    )
    stall_unavailable_s: float = option(
        10.0,
        "/health answers 503 when requests wait and no step has finished for this many seconds "
        "(more than --stall-degraded-s): a load balancer should send traffic elsewhere",
    )
    switch_interval_ms: float = option(
        0.5,
        "the server process's GIL switch interval (sys.setswitchinterval; Python's default is 5 ms): the "
        "engine core's thread and the HTTP loop share the GIL, and each time the front end wakes it waits "
        "up to this long behind pure-Python control work (a solve, a predictor refresh)",
    )
    control_cpu_share: float = option(
        0.05,
        "share of one core the operating-point tuner's replays may use: they run in a process beside the "
        "step loop, and after a replay that used c CPU-seconds the next starts no sooner than c / this "
        "later (the server serves at its current point meanwhile)",
    )
    control_burst_s: float = option(
        SERVE_CONTROL_BURST_S,
        "CPU-seconds of replay the control budget may save up while the server is quiet and spend at once "
        "when the load rises (0: none, every tuning waits for the last one's share): a burst after a quiet "
        "spell is tuned at once, and over time the replays still use --control-cpu-share of a core",
    )
    control_niceness: int = option(
        BudgetConfig.niceness,
        "how much lower the replays' process runs than the server's CPU priority (os.nice; 0 to 19): where "
        "the instances share cores with the control plane, a replay yields the CPU to the steps (0: the same "
        "priority)",
    )
    admin_api: bool = option(
        False,
        "serve POST /admin/reconfigure, which applies an operator's cluster configuration live; "
        "it changes the cluster, so keep the port private when it is on",
    )
    # The per-concern configs; the step law comes from the artifacts at start-up.
    control: ControlConfig = nested(
        ControlConfig,
        exclude=("step_law",),
        # A live machine's step time is bimodal under load, and a step of a full batch
        # there can take seconds: the server caps a step's time and refuses the waiting
        # requests its measured steps show will miss (``bench burst --hog``); a simulation
        # keeps the class's defaults.
        defaults={
            "step_time_quantile": SERVE_STEP_TIME_QUANTILE,
            "step_time_estimator": SERVE_STEP_TIME_ESTIMATOR,
            "step_time_hold_s": SERVE_STEP_TIME_HOLD_S,
            "max_step_ms": SERVE_MAX_STEP_MS,
            "recheck_queue": True,
        },
    )
    reconfig: ReconfigConfig | None = nested(
        ReconfigConfig,
        prefix="reconfig",
        exclude=("tokens_per_step", "block_length"),
        defaults={"interval_s": SERVE_RECONFIG_INTERVAL_S},
        build=reconfig_or_off,
        help="reconfiguration (--reconfig-interval-s 0 switches it off); its tokens per step come from the "
        "step law, its block length from --block-length",
    )
    monitor: MonitorConfig = nested(MonitorConfig, prefix="monitor")
    scheduler: SchedulerConfig = nested(SchedulerConfig)
    # A server's replays take time: a rise's point comes back sooner on a shorter forecast.
    tuner: TunerConfig = nested(TunerConfig, prefix="tuner", defaults={"rise_forecast_s": SERVE_RISE_FORECAST_S})
    engine: EngineConfig = nested(EngineConfig)

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu or cuda, not {self.device!r}")
        if self.num_slots < 1 or self.slots_per_node < 1:
            raise ValueError("--num-slots and --slots-per-node must be at least 1")
        if self.num_slots % self.slots_per_node and self.num_slots > self.slots_per_node:
            raise ValueError(f"--num-slots {self.num_slots} is not a whole number of nodes of {self.slots_per_node}")
        if any(tp < 1 or tp & (tp - 1) for tp in self.tp_degrees):
            raise ValueError(f"--tp-degrees must be powers of two, got {self.tp_degrees}: e.g. --tp-degrees 1 2")
        if self.initial_tp not in self.tp_degrees or self.initial_tp > min(self.slots_per_node, self.num_slots):
            raise ValueError(
                f"--initial-tp {self.initial_tp} must be one of --tp-degrees {self.tp_degrees} and fit on a node"
            )
        if self.startup_timeout_s <= 0:
            raise ValueError(f"--startup-timeout-s must be positive, got {self.startup_timeout_s}")
        if self.default_slo_ms <= 0:
            raise ValueError(f"--default-slo-ms {self.default_slo_ms} must be positive milliseconds, e.g. 20000")
        if self.default_max_tokens < 1 or self.block_length < 1:
            raise ValueError("--default-max-tokens and --block-length must be positive")
        if self.max_request_bytes < 1024:
            raise ValueError(f"--max-request-bytes {self.max_request_bytes}: allow at least 1024 (default 1 MiB)")
        if not 0.05 <= self.switch_interval_ms <= 100:
            raise ValueError(
                f"--switch-interval-ms {self.switch_interval_ms}: choose between 0.05 and 100 ms (default 0.5)"
            )
        if self.api_key is None:
            self.api_key = os.environ.get(API_KEY_ENV) or None
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError(
                f"--api-key (or {API_KEY_ENV}) is empty: give a key, or leave it unset to serve without one"
            )
        if not 0 < self.stall_degraded_s < self.stall_unavailable_s:
            raise ValueError(
                f"--stall-degraded-s {self.stall_degraded_s} and --stall-unavailable-s {self.stall_unavailable_s}: "
                "both must be positive and the first smaller (default 2 and 10)"
            )
        if self.max_queue < 1:
            raise ValueError(f"--max-queue {self.max_queue}: allow at least 1 request in flight (default 256)")

    @property
    def thresholds(self) -> tuple[float, ...]:
        """The candidate thresholds, ascending (``control`` owns them)."""
        return self.control.thresholds

    @property
    def nodes(self) -> int:
        return max(1, self.num_slots // self.slots_per_node)

    @property
    def gpus_per_node(self) -> int:
        return min(self.slots_per_node, self.num_slots)
