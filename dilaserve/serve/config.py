"""Server configuration: one dataclass, every field a documented ``--kebab-case`` flag."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS
from dilaserve.engine import DEFAULT_CHECKPOINT
from dilaserve.utils.cli import option


@dataclass
class ServeConfig:
    """``python -m dilaserve.serve`` options."""

    model: str = option(str(DEFAULT_CHECKPOINT), "checkpoint folder to serve (the embedded default model by default)")
    served_model_name: Optional[str] = option(None, "model name in the API (default: the checkpoint folder's name)")
    host: str = option("127.0.0.1", "address to listen on")
    port: int = option(8000, "port to listen on")
    device: str = option("cpu", "cpu (instances use CPU slots, gloo) or cuda (GPUs, NCCL)")
    num_slots: int = option(2, "GPUs (or CPU slots with --device cpu) the cluster may use")
    slots_per_node: int = option(2, "GPUs (or CPU slots) per node; a TP group never spans nodes")
    tp_degrees: list[int] = option([1, 2], "tensor-parallel degrees reconfiguration may use")
    initial_tp: int = option(1, "TP degree of the instances launched at start (the cluster starts uniform)")
    thresholds: list[float] = option(list(CANDIDATE_THRESHOLDS), "candidate denoising thresholds")
    default_slo_ms: float = option(20000.0, "SLO for requests that send neither slo_ms nor deadline")
    policy: str = option("dilaserve", "scheduling policy: dilaserve, dilaserve-paper, infaas, llumnix, fixed@TAU "
                         "or an ablation")
    quality_budget: Optional[float] = option(
        0.1, "largest relative accuracy loss accepted for speed: thresholds whose measured accuracy is below "
        "(1 - budget) x the best candidate's are not used (needs the threshold-quality artifact)")
    admission_headroom: float = option(
        0.1, "SLO-aware admission answers 429 to a request predicted to miss its SLO, or whose joining would push "
        "two or more requests in flight out of this share of their SLO time left (dilaserve-no-admission "
        "serves everything)")
    reconfig_interval_s: float = option(60.0, "seconds between reconfiguration ticks (0 disables reconfiguration)")
    max_batch_tokens: int = option(4096, "tokens one instance may hold in its batch")
    max_queue: int = option(256, "requests in flight (running + waiting) before new ones get HTTP 429")
    default_max_tokens: int = option(64, "generation length when a request sends no max_tokens")
    block_length: int = option(32, "denoising block length")
    artifacts: str = option("data/artifacts", "folder with the pipeline's predictor and latency profiles")
    ray_address: Optional[str] = option(None, "join an existing Ray cluster (default: start a local one)")
    torch_threads: int = option(1, "intra-op threads per CPU worker")
    drain_timeout_s: float = option(30.0, "on SIGINT/SIGTERM, wait this long for in-flight requests before failing them")
    log_level: str = option("info", "logging level")

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ValueError(f"--device must be cpu or cuda, not {self.device!r}")
        if self.num_slots < 1 or self.slots_per_node < 1:
            raise ValueError("--num-slots and --slots-per-node must be at least 1")
        if self.num_slots % self.slots_per_node and self.num_slots > self.slots_per_node:
            raise ValueError(f"--num-slots {self.num_slots} is not a whole number of nodes of {self.slots_per_node}")
        if any(tp < 1 or tp & (tp - 1) for tp in self.tp_degrees):
            raise ValueError(f"--tp-degrees must be powers of two, got {self.tp_degrees}")
        if self.initial_tp not in self.tp_degrees or self.initial_tp > min(self.slots_per_node, self.num_slots):
            raise ValueError(f"--initial-tp {self.initial_tp} must be one of --tp-degrees {self.tp_degrees} and fit on a node")
        if not self.thresholds or any(not 0 < t <= 1 for t in self.thresholds):
            raise ValueError(f"--thresholds must lie in (0, 1], got {self.thresholds}")
        if self.default_slo_ms <= 0:
            raise ValueError("--default-slo-ms must be positive")
        if self.default_max_tokens < 1 or self.block_length < 1:
            raise ValueError("--default-max-tokens and --block-length must be positive")
        if self.quality_budget is not None and not 0 <= self.quality_budget < 1:
            raise ValueError(f"--quality-budget {self.quality_budget} must lie in [0, 1), e.g. 0.1 (within 10% of "
                             "the best threshold's accuracy)")
        if not 0 <= self.admission_headroom < 1:
            raise ValueError(f"--admission-headroom {self.admission_headroom} must lie in [0, 1), e.g. 0.1")
        if self.max_queue < 1:
            raise ValueError("--max-queue must be at least 1")

    @property
    def nodes(self) -> int:
        return max(1, self.num_slots // self.slots_per_node)

    @property
    def gpus_per_node(self) -> int:
        return min(self.slots_per_node, self.num_slots)
