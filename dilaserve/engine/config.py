"""How an engine sizes its K/V pool and runs its cache steps (docs/architecture.md, "Engine
memory layout and captured steps")."""

from __future__ import annotations

from dataclasses import dataclass

#: Batch sizes a cache step is padded to, so that a few static shapes (one CUDA graph each)
#: serve every batch; larger batches round up to a multiple of the last.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class EngineConfig:
    """Memory and capture settings of one :class:`~dilaserve.engine.DenoisingEngine`.

    Attributes:
        gpu_memory_utilization: on CUDA, the fraction of the device's total memory this engine
            may hold in all (weights, K/V pool, activations), as vLLM's option of that name; the
            pool gets what is left of it after the weights and ``activation_reserve_bytes``.
            In (0, 1].
        activation_reserve_bytes: on CUDA, bytes kept out of the pool for the activations of
            recompute passes and the captured graphs' buffers. A recompute pass over ``b``
            canvases of ``t`` tokens briefly holds every layer's K/V of them (``b t`` times
            the pool's bytes per token) besides its activations: raise this if recompute
            passes run out of memory.
        kv_cache_bytes: off CUDA, the most bytes the K/V pool may take. The pool grows to it
            on demand (doubling), so a small workload costs little.
        slot_tokens: tokens one pool slot holds, the longest canvas (prompt + gen_length)
            served with the cache; None: the model's context, at most 2048. A longer
            request still decodes, recomputing every step.
        context_granule: a cache step attends over its requests' longest context rounded up
            to a multiple of this (at most ``slot_tokens``), so that few static shapes serve
            every step. None: 128 tokens where steps are captured (each shape is a graph to
            capture and keep), the step's block length where they run eagerly (attention over
            padding costs compute there, and shapes cost nothing).
        cuda_graphs: on CUDA, replay cache steps from graphs captured per (batch bucket,
            context, fed length); ignored elsewhere. Off: every step runs eagerly.
    """

    gpu_memory_utilization: float = 0.9
    activation_reserve_bytes: int = 8 << 30
    kv_cache_bytes: int = 4 << 30
    slot_tokens: int | None = None
    context_granule: int | None = None
    cuda_graphs: bool = True

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization {self.gpu_memory_utilization} is outside (0, 1]: pass the fraction "
                "of the GPU's memory the engine may use, e.g. 0.9 (--gpu-memory-utilization 0.9)"
            )
        for name in ("activation_reserve_bytes", "kv_cache_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} {getattr(self, name)} is negative: pass a byte count, e.g. {4 << 30}")
        if self.slot_tokens is not None and self.slot_tokens < 1:
            raise ValueError(
                f"slot_tokens {self.slot_tokens} must be positive: pass the longest prompt + gen_length to "
                "serve with the cache, e.g. 2048 (--slot-tokens 2048)"
            )
        if self.context_granule is not None and self.context_granule < 1:
            raise ValueError(f"context_granule {self.context_granule} must be positive, e.g. 128")


def batch_bucket(n: int) -> int:
    """The batch size a step of ``n`` requests is padded to (:data:`BATCH_BUCKETS`)."""
    for b in BATCH_BUCKETS:
        if n <= b:
            return b
    top = BATCH_BUCKETS[-1]
    return -(-n // top) * top


def context_bucket(tokens: int, granule: int, limit: int) -> int:
    """``tokens`` rounded up to a multiple of ``granule``, at most ``limit``."""
    return min(limit, -(-tokens // granule) * granule)
