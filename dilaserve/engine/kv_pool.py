"""The engine's persistent K/V pool: one slot per cached request, allocated once.

Layout (docs/architecture.md, "Engine memory layout and captured steps"): one tensor
``(layers, 2, slots, kv_heads, slot_tokens, head_dim)``, K at ``[:, 0]`` and V at ``[:, 1]``.
A request's K/V sit at token positions ``0 .. n`` of its slot, where they are in its canvas,
so a cache step attends to ``kv[layer, 0, lo:hi, :, :S]`` (a view: no gather, no copy) and
writes only the fed block's fresh K/V into it. A canvas has a known size, so a slot, not
pages, is the unit: a request takes one at its first recompute step and keeps it until it
finishes, is released or migrates away.

The slots in use are always the first ones: a request takes the next slot, and one that
leaves hands its slot to the request in the last one (one copy of that request's K/V, once),
so the requests an engine decodes form one contiguous window of slots. On CUDA the whole
pool is allocated up front (captured graphs hold its address); elsewhere it grows, doubling,
up to its budget.
"""

from __future__ import annotations

import torch

from .config import EngineConfig


class PoolFull(RuntimeError):
    """No free slot: the request must wait for one (or run without the cache)."""


class KVPool:
    """Slots of K/V for the requests of one engine (one tensor-parallel rank's heads)."""

    def __init__(
        self,
        layers: int,
        kv_heads: int,
        head_dim: int,
        slot_tokens: int,
        max_slots: int,
        dtype: torch.dtype,
        device: torch.device,
        grow: bool = True,
    ):
        if max_slots < 1:
            raise PoolFull(
                f"the K/V budget holds no slot of {slot_tokens} tokens ({_bytes_per_slot(layers, kv_heads, head_dim, slot_tokens, dtype)} "
                "bytes): raise the budget (--gpu-memory-utilization or --kv-cache-bytes) or lower --kv-slot-tokens"
            )
        self.slot_tokens, self.max_slots = slot_tokens, max_slots
        self._grow = grow
        first = min(max_slots, 4) if grow else max_slots
        # zeros once, at allocation: masked keys of a slot must hold finite values, since
        # attention multiplies their (zero) weights with them
        self.kv = torch.zeros(layers, 2, first, kv_heads, slot_tokens, head_dim, dtype=dtype, device=device)
        self._slot: dict[str, int] = {}  # request id -> slot
        self._owner: list[str] = []  # slot -> request id: the slots in use are 0 .. len - 1
        self._tokens: dict[str, int] = {}  # request id -> tokens of valid K/V in its slot

    @classmethod
    def for_model(cls, model: torch.nn.Module, max_context: int, config: EngineConfig) -> KVPool:
        """A pool sized for ``model`` (the embedded or a native one, sharded or not) from
        ``config``'s budget."""
        attn = model.layers[0].attn
        kv_heads = getattr(attn, "n_kv_head", attn.n_head)  # the embedded model has no GQA
        param = next(model.parameters())
        # positions past the model's context have no rotary table: a slot never holds more
        slot_tokens = min(config.slot_tokens or 2048, max_context)
        per_slot = _bytes_per_slot(len(model.layers), kv_heads, attn.head_dim, slot_tokens, param.dtype)
        on_cuda = param.device.type == "cuda"
        if on_cuda:
            total = torch.cuda.get_device_properties(param.device).total_memory
            budget = (
                config.gpu_memory_utilization * total
                - torch.cuda.memory_allocated(param.device)
                - config.activation_reserve_bytes
            )
        else:
            budget = config.kv_cache_bytes
        return cls(
            len(model.layers),
            kv_heads,
            attn.head_dim,
            slot_tokens,
            int(max(0, budget) // per_slot),
            param.dtype,
            param.device,
            grow=not on_cuda,
        )

    # ------------------------------------------------------------ slots
    @property
    def capacity(self) -> int:
        """Slots allocated now (at most :attr:`max_slots`)."""
        return self.kv.shape[2]

    @property
    def free_slots(self) -> int:
        """Slots a new request could still take."""
        return self.max_slots - len(self._slot)

    def can_admit(self, n: int = 1) -> bool:
        """Whether ``n`` more requests can take a slot now."""
        return self.free_slots >= n

    def fits(self, tokens: int) -> bool:
        """Whether a canvas of ``tokens`` fits one slot."""
        return tokens <= self.slot_tokens

    def reserve(self, request_id: str) -> int:
        """The request's slot, taking the next free one if it has none (raises :class:`PoolFull`)."""
        if request_id in self._slot:
            return self._slot[request_id]
        slot = len(self._owner)
        if slot >= self.max_slots:
            raise PoolFull(
                f"all {self.max_slots} K/V slots are taken: let request {request_id} wait for one to free "
                "(a finished or released request frees its slot), or raise the pool's budget "
                "(--gpu-memory-utilization on CUDA, --kv-cache-bytes elsewhere)"
            )
        self.ensure_capacity(slot + 1)
        self._owner.append(request_id)
        self._slot[request_id], self._tokens[request_id] = slot, 0
        return slot

    def ensure_capacity(self, slots: int) -> bool:
        """Grow the pool (off CUDA) to hold ``slots`` slots; whether it does now."""
        if slots <= self.capacity:
            return True
        if not self._grow or slots > self.max_slots:
            return False
        n = min(self.max_slots, max(slots, 2 * self.capacity))
        shape = list(self.kv.shape)
        shape[2] = n - self.capacity
        self.kv = torch.cat((self.kv, self.kv.new_zeros(shape)), dim=2)
        return True

    def release(self, request_id: str) -> None:
        """Free the request's slot; the request in the last slot moves into it, so the slots in
        use stay the first ones (call between steps, never during one)."""
        slot = self._slot.pop(request_id, None)
        self._tokens.pop(request_id, None)
        if slot is None:
            return
        last = self._owner.pop()
        if last != request_id:
            n = self._tokens[last]
            self.kv[:, :, slot, :, :n] = self.kv[:, :, len(self._owner), :, :n]
            self._owner[slot], self._slot[last] = last, slot

    def slot(self, request_id: str) -> int | None:
        return self._slot.get(request_id)

    def tokens(self, request_id: str) -> int:
        """Tokens of valid K/V the request's slot holds (0: none)."""
        return self._tokens.get(request_id, 0)

    def set_tokens(self, request_id: str, n: int) -> None:
        self._tokens[request_id] = n

    def requests(self) -> frozenset[str]:
        return frozenset(self._slot)

    # ------------------------------------------------------------ K/V
    def view(self, request_id: str) -> torch.Tensor:
        """The request's valid K/V, ``(layers, 2, kv_heads, tokens, head_dim)``: a view."""
        return self.kv[:, :, self._slot[request_id], :, : self._tokens[request_id]]

    def store(self, request_id: str, kv: torch.Tensor) -> None:
        """Write ``kv`` ``(layers, 2, kv_heads, n, head_dim)`` at the start of the request's
        slot (raises :class:`PoolFull`, or ``ValueError`` for K/V of another shape)."""
        want = (self.kv.shape[0], 2, self.kv.shape[3], self.kv.shape[5])
        got = (kv.shape[0], kv.shape[1], kv.shape[2], kv.shape[4])
        if kv.dim() != 5 or got != want or kv.shape[3] > self.slot_tokens:
            raise ValueError(
                f"a cache of shape {tuple(kv.shape)} does not fit this pool's slots {want[:3]} x "
                f"{self.slot_tokens} tokens x {want[3]}: ship caches only between instances of the same "
                "checkpoint and tensor-parallel degree"
            )
        n = kv.shape[3]
        self.kv[:, :, self.reserve(request_id), :, :n] = kv
        self._tokens[request_id] = n

    def store_row(self, request_id: str, kv: list[tuple[torch.Tensor, torch.Tensor]], row: int, n: int) -> None:
        """Write the first ``n`` tokens of row ``row`` of a recompute pass's per-layer K/V
        (each ``(batch, kv_heads, tokens, head_dim)``) into the request's slot (raises
        :class:`PoolFull`)."""
        slot = self.reserve(request_id)
        for layer, (k, v) in enumerate(kv):
            self.kv[layer, 0, slot, :, :n] = k[row, :, :n]
            self.kv[layer, 1, slot, :, :n] = v[row, :, :n]
        self._tokens[request_id] = n

    def window(self, first: int, rows: int, tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-layer (K, V) views of slots ``first .. first + rows`` up to ``tokens``: what a
        pooled cache step attends to and writes into."""
        end = first + rows
        return [(layer[0, first:end, :, :tokens], layer[1, first:end, :, :tokens]) for layer in self.kv]


def _bytes_per_slot(layers: int, kv_heads: int, head_dim: int, tokens: int, dtype: torch.dtype) -> int:
    return layers * 2 * kv_heads * tokens * head_dim * torch.empty(0, dtype=dtype).element_size()
