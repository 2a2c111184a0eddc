"""Tensor parallelism for :class:`DiLaForMaskedDiffusion` over ``torch.distributed``.

Megatron-style sharding of every block across ``world_size`` ranks:

* attention: the fused ``qkv`` projection is column-parallel (each rank keeps the Q, K and
  V rows of its own heads), attention runs on local heads, and ``out`` is row-parallel
  (each rank keeps the input columns of its heads) followed by an all-reduce;
* MLP: the fused ``gate_up`` is column-parallel (each rank keeps the same slice of gate and
  of up, so ``chunk(2)`` still pairs them) and ``down`` is row-parallel + all-reduce.

Embedding, norms and LM head stay replicated for the embedded model (they are small). The
native LLaDA and Dream modules (:func:`shard_native`) shard the same way with separate
q|k|v row blocks (grouped K/V heads split like the query heads), and shard their
vocabulary-sized embedding and head by rows too, since at 126k-152k rows they are not
small: each rank embeds the ids in its row range (zeros elsewhere) and an all-reduce sums
the ranks' rows; each rank's head computes its slice of the vocabulary and an all-gather
assembles the logits. Every rank ends with the full logits; the K/V a rank returns for
caching covers its heads only, exactly what the same rank needs at the next cache step.

Typical use, one process per rank (gloo on CPU, NCCL on GPU)::

    init_distributed(rank, world_size, init_method)   # or let run_tp do it
    model = shard_model(load(...), rank, world_size)

:func:`run_tp` spawns the ranks on this host and returns rank 0's result; the Ray runtime
uses :class:`TPWorker` as the body of each of an instance's workers.
"""

from __future__ import annotations

import os
import pickle
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from dilaserve.utils.net import free_port

from .adapters import load_diffusion_lm
from .modeling import Attention, DiLaForMaskedDiffusion
from .native import NativeAttention, NativeDiffusionLM


def default_backend(device: str) -> str:
    return "nccl" if str(device).startswith("cuda") else "gloo"


def rank_device(device: str, rank: int) -> str:
    """The device of ``rank``: ``cuda`` means one GPU per rank (``cuda:<rank>``)."""
    return f"cuda:{rank}" if str(device) == "cuda" else str(device)


def init_distributed(rank: int, world_size: int, init_method: str, device: str = "cpu") -> None:
    """Join the process group of one TP instance (``init_method`` e.g. ``tcp://127.0.0.1:29500``)."""
    if str(device).startswith("cuda"):
        torch.cuda.set_device(torch.device(rank_device(device, rank)))
    if not dist.is_initialized():
        dist.init_process_group(default_backend(device), init_method=init_method, rank=rank, world_size=world_size)


class RowParallelLinear(nn.Linear):
    """A linear layer holding a slice of the input features; all-reduces partial outputs."""

    def __init__(self, in_features: int, out_features: int, group: dist.ProcessGroup | None = None):
        super().__init__(in_features, out_features, bias=False)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight)
        if dist.is_initialized() and dist.get_world_size(self.group) > 1:
            dist.all_reduce(y, group=self.group)
        return y


class ShardedAttention(Attention):
    """Attention over this rank's heads; ``forward`` is :class:`Attention`'s own."""

    def __init__(self, full: Attention, rank: int, world_size: int, group=None):
        nn.Module.__init__(self)  # the weights come from ``full``, not from a config
        self.n_head = full.n_head // world_size
        self.head_dim = full.head_dim
        hidden = full.qkv.in_features
        local = self.n_head * self.head_dim
        lo = rank * local
        w = full.qkv.weight.detach().view(3, hidden, hidden)  # (q|k|v, out features, in features)
        self.qkv = nn.Linear(hidden, 3 * local, bias=False, device=w.device, dtype=w.dtype)
        self.qkv.weight.data.copy_(w[:, lo : lo + local].reshape(3 * local, hidden))
        self.out = RowParallelLinear(local, hidden, group).to(device=w.device, dtype=w.dtype)
        self.out.weight.data.copy_(full.out.weight.detach()[:, lo : lo + local])


def _shard_mlp(mlp: nn.Module, rank: int, world_size: int, group) -> None:
    gate_up, down = mlp.gate_up, mlp.down
    inter = down.in_features
    local = inter // world_size
    lo = rank * local
    w = gate_up.weight.detach().view(2, inter, -1)  # (gate|up, intermediate, hidden)
    new_gu = nn.Linear(w.shape[2], 2 * local, bias=False, device=w.device, dtype=w.dtype)
    new_gu.weight.data.copy_(w[:, lo : lo + local].reshape(2 * local, -1))
    new_down = RowParallelLinear(local, down.out_features, group).to(device=w.device, dtype=w.dtype)
    new_down.weight.data.copy_(down.weight.detach()[:, lo : lo + local])
    mlp.gate_up, mlp.down = new_gu, new_down


def _rows(w: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    n = w.shape[0] // world_size
    return w[rank * n : (rank + 1) * n]


def _world(group) -> int:
    return dist.get_world_size(group) if dist.is_initialized() else 1


class VocabParallelEmbedding(nn.Module):
    """This rank's rows of the embedding; the ranks' partial embeddings are summed."""

    def __init__(self, full: nn.Embedding, rank: int, world_size: int, group=None):
        super().__init__()
        self.weight = nn.Parameter(_rows(full.weight.detach(), rank, world_size).clone())
        self.lo, self.group = rank * self.weight.shape[0], group

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.lo
        inside = (local >= 0) & (local < self.weight.shape[0])
        x = F.embedding(local.clamp(0, self.weight.shape[0] - 1), self.weight) * inside[..., None].to(self.weight.dtype)
        if _world(self.group) > 1:
            dist.all_reduce(x, group=self.group)
        return x


class VocabParallelHead(nn.Module):
    """This rank's rows of the LM head; the ranks' vocabulary slices are gathered."""

    def __init__(self, weight: nn.Parameter, group=None):
        super().__init__()
        self.weight, self.group = weight, group

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        y = F.linear(h, self.weight)
        n = _world(self.group)
        if n == 1:
            return y
        parts = [torch.empty_like(y) for _ in range(n)]
        dist.all_gather(parts, y.contiguous(), group=self.group)
        return torch.cat(parts, dim=-1)


class ShardedNativeAttention(NativeAttention):
    """This rank's query heads and K/V heads; ``forward`` is :class:`NativeAttention`'s own."""

    def __init__(self, full: NativeAttention, rank: int, world_size: int, group=None):
        nn.Module.__init__(self)  # the weights come from ``full``, not from a spec
        D = full.head_dim
        self.n_head, self.n_kv_head, self.head_dim = full.n_head // world_size, full.n_kv_head // world_size, D
        sizes = (full.n_head * D, full.n_kv_head * D, full.n_kv_head * D)

        def local(t: torch.Tensor) -> torch.Tensor:  # this rank's rows of each of q, k and v
            return torch.cat([_rows(part, rank, world_size) for part in t.detach().split(sizes)])

        w = full.qkv.weight
        self.qkv = nn.Linear(
            w.shape[1],
            (self.n_head + 2 * self.n_kv_head) * D,
            bias=full.qkv.bias is not None,
            device=w.device,
            dtype=w.dtype,
        )
        self.qkv.weight.data.copy_(local(w))
        if full.qkv.bias is not None:
            self.qkv.bias.data.copy_(local(full.qkv.bias))
        lo = rank * self.n_head * D
        self.out = RowParallelLinear(self.n_head * D, full.out.out_features, group).to(device=w.device, dtype=w.dtype)
        self.out.weight.data.copy_(full.out.weight.detach()[:, lo : lo + self.n_head * D])


def shard_native(model: NativeDiffusionLM, rank: int, world_size: int, group=None) -> NativeDiffusionLM:
    """Shard a native LLaDA / Dream model in place: heads, MLP, embedding and head."""
    spec = model.spec
    sizes = {
        "num_heads": spec.num_heads,
        "num_kv_heads": spec.num_kv_heads,
        "intermediate_size": spec.intermediate_size,
        "vocab_size": spec.vocab_size,
    }
    bad = {k: v for k, v in sizes.items() if v % world_size}
    if bad:
        raise ValueError(
            f"TP degree {world_size} must divide {bad} of this {spec.family} checkpoint: pick a TP degree "
            f"that divides {sizes}"
        )
    if world_size == 1:
        return model
    for block in model.layers:
        block.attn = ShardedNativeAttention(block.attn, rank, world_size, group)
        _shard_mlp(block.mlp, rank, world_size, group)
    embed = VocabParallelEmbedding(model.embed, rank, world_size, group)
    head_rows = (
        embed.weight
        if spec.tie_embeddings
        else nn.Parameter(_rows(model.head.weight.detach(), rank, world_size).clone())
    )
    model.embed, model.head = embed, VocabParallelHead(head_rows, group)
    return model


def shard_model(model: DiLaForMaskedDiffusion, rank: int, world_size: int, group=None) -> DiLaForMaskedDiffusion:
    """Shard ``model`` in place for ``rank`` of ``world_size`` and return it.

    Heads and the MLP width must divide evenly by ``world_size`` (and, for LLaDA and
    Dream, the K/V heads and the vocabulary too).
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
    if isinstance(model, NativeDiffusionLM):
        return shard_native(model, rank, world_size, group)
    cfg = model.config
    if cfg.num_heads % world_size or cfg.intermediate_size % world_size:
        raise ValueError(
            f"TP degree {world_size} must divide num_heads ({cfg.num_heads}) and intermediate_size "
            f"({cfg.intermediate_size}): pick a TP degree among the common divisors"
        )
    if world_size == 1:
        return model
    for block in model.layers:
        block.attn = ShardedAttention(block.attn, rank, world_size, group)
        _shard_mlp(block.mlp, rank, world_size, group)
    return model


# ------------------------------------------------------------------ processes
@dataclass(frozen=True)
class TPWorker:
    """What one rank of a TP instance needs to build its shard.

    ``load()`` loads the checkpoint on ``device`` and shards it; call it after
    :func:`init_distributed` (or inside :func:`run_tp`).
    """

    checkpoint: str
    rank: int
    world_size: int
    device: str = "cpu"
    threads: int | None = None

    def load(self) -> DiLaForMaskedDiffusion | NativeDiffusionLM:
        if self.threads:
            torch.set_num_threads(self.threads)
        # the adapter validates the folder and says what is wrong with it
        model = load_diffusion_lm(Path(self.checkpoint).resolve(), device=rank_device(self.device, self.rank)).model
        if not isinstance(model, (DiLaForMaskedDiffusion, NativeDiffusionLM)):
            raise ValueError(
                f"{self.checkpoint}: tensor parallelism shards the embedded model, LLaDA and Dream; "
                f"got {type(model).__name__} (serve it at TP 1)"
            )
        return shard_model(model, self.rank, self.world_size)


def _entry(rank: int, world_size: int, init_method: str, device: str, fn: Callable, args: tuple, queue) -> None:
    try:
        init_distributed(rank, world_size, init_method, device)
        out = fn(rank, world_size, *args)
        # Plain pickle copies tensors into bytes; the queue's own pickler would share them
        # through file descriptors that vanish when this process exits before the parent reads.
        queue.put((rank, True, pickle.dumps(out) if rank == 0 else None))
    except BaseException:  # report to the parent instead of dying silently
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _collect(queue, procs, timeout_s: float) -> list:
    """One result per rank; fails fast if a rank dies without reporting (e.g. a crash)."""
    results, deadline = [], time.monotonic() + timeout_s
    while len(results) < len(procs):
        if not queue.empty():
            results.append(queue.get())
            continue
        reported = {r[0] for r in results}
        dead = [i for i, p in enumerate(procs) if p.exitcode not in (None, 0) and i not in reported]
        if dead or time.monotonic() > deadline:
            for p in procs:
                if p.is_alive():
                    p.terminate()
            why = (
                f"rank {dead[0]} exited with code {procs[dead[0]].exitcode}"
                if dead
                else f"no result within {timeout_s:.0f} s"
            )
            raise RuntimeError(f"tensor-parallel run failed: {why}")
        time.sleep(0.02)
    for p in procs:
        p.join()
    return results


def run_tp(fn: Callable[..., Any], world_size: int, *args, device: str = "cpu", timeout_s: float = 600.0) -> Any:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` spawned ranks on this host.

    ``fn`` must be importable (module level). Returns rank 0's return value; raises
    ``RuntimeError`` with the failing rank's traceback if any rank fails. A single rank
    needs no process group and runs in this process (saving a process start).
    """
    if world_size == 1:
        return fn(0, 1, *args)
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    init_method = f"tcp://127.0.0.1:{free_port()}"
    # Spawned children import this package; keep their thread pools from oversubscribing.
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        procs = [
            ctx.Process(target=_entry, args=(r, world_size, init_method, device, fn, args, queue))
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        results = _collect(queue, procs, timeout_s)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    failed = [r for r in results if not r[1]]
    if failed:
        raise RuntimeError(f"TP rank {failed[0][0]} failed:\n{failed[0][2]}")
    return pickle.loads(next(r[2] for r in results if r[0] == 0))
