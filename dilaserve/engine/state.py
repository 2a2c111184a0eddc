"""Per-request denoising state.

A request's state between two steps is small: prompt ids, the response canvas,
the current block, counters and the confidence statistics of the last step.
It is plain numpy (no torch), so the control plane, the simulator and the
serialiser can use it without loading a model. Migration ships exactly this
object; the KV cache is *not* part of it. The destination rebuilds a
bidirectional request's cache at its next recompute step; a block-causal
request's exact cache travels beside the state where it can (the engine's
``export_cache``), else one prefill rebuilds it.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field

import numpy as np

#: Number of confidence statistics kept per step (min, q25, median, mean, q75).
N_CONF_STATS = 5


class StepKind(str, enum.Enum):
    """What the next denoising step of a request costs.

    RECOMPUTE runs the whole sequence and refreshes every layer's K/V;
    CACHE feeds only the current block and attends to cached K/V.

    A block-causal (block-diffusion) request has one RECOMPUTE step, its prefill: the
    prompt, the finished blocks and the current block in one pass, which builds its exact
    cache (on its first step, and again after a migration that did not bring the cache
    along). Every other step is a CACHE
    step; the first one of each new block also feeds the block just finished, whose exact
    K/V it appends to the cache (``RequestState.append_pending``).
    """

    RECOMPUTE = "recompute"
    CACHE = "cache"


@dataclass
class RequestState:
    """Everything needed to continue decoding a request on any engine.

    ``response`` holds ``gen_length`` token ids; masked positions hold
    ``mask_id``. Blocks of ``block_length`` are decoded left to right, and a
    step commits only inside the current block, so every earlier block is
    complete and every later one still fully masked. The progress counters
    below rely on that and look at the current block only: they run once per
    request per step, in the engine and in the simulator alike.

    ``apply_step`` is the only writer of the canvas: it commits masked positions
    of the current block and keeps two counters of that block (tokens committed,
    whether an EOS is among them), so progress queries never scan the canvas.

    The canvas is an upper bound on the answer, as ``max_tokens`` is for an
    OpenAI client: the model ends its answer with EOS wherever it is done, and
    the rest of the canvas becomes EOS padding. ``max_tokens`` (None: the whole
    canvas) caps the answer inside a canvas of whole blocks.
    """

    request_id: str
    prompt_ids: np.ndarray
    gen_length: int
    block_length: int
    mask_id: int
    eos_id: int
    use_cache: bool = True
    response: np.ndarray = field(default=None)  # type: ignore[assignment]
    block_index: int = 0
    steps_done: int = 0
    recompute_steps_done: int = 0
    #: True once the current block has had its recompute step (its K/V cached).
    block_cached: bool = False
    finished: bool = False
    thresholds_used: list = field(default_factory=list)
    tokens_per_step: list = field(default_factory=list)
    #: Confidence statistics of the last step over the masked positions of the
    #: block it decoded (before committing). Zeros before the first step.
    conf_stats: np.ndarray = field(default=None)  # type: ignore[assignment]
    #: Most answer tokens the client accepts (None: the whole canvas); at most ``gen_length``.
    max_tokens: int | None = None
    #: Block diffusion (the model's ``block_causal``): the cache of the prompt and finished
    #: blocks is exact and kept across blocks, so the request has no recompute steps after
    #: its prefill; ``gen_length`` is only an upper bound on the blocks it decodes.
    block_causal: bool = False
    #: Block-causal only: the block before the current one is finished, but its exact K/V
    #: are not in the cache yet (the next step feeds it along with the current block).
    append_pending: bool = False

    def __post_init__(self) -> None:
        self.prompt_ids = np.asarray(self.prompt_ids, dtype=np.int64)
        if self.gen_length <= 0 or self.block_length <= 0:
            raise ValueError(f"gen_length ({self.gen_length}) and block_length ({self.block_length}) must be positive")
        if self.gen_length % self.block_length:
            raise ValueError(
                f"block_length {self.block_length} does not divide gen_length {self.gen_length}: "
                f"choose a gen_length that is a multiple of {self.block_length}"
            )
        if self.max_tokens is not None and not 1 <= self.max_tokens <= self.gen_length:
            raise ValueError(
                f"max_tokens {self.max_tokens} must lie in 1..gen_length ({self.gen_length}): "
                "the canvas holds the answer, so make gen_length at least max_tokens"
            )
        if self.response is None:
            self.response = np.full(self.gen_length, self.mask_id, dtype=np.int64)
        else:
            self.response = np.asarray(self.response, dtype=np.int64)
        if self.conf_stats is None:
            self.conf_stats = np.zeros(N_CONF_STATS, dtype=np.float64)
        self._count_block()

    def _count_block(self) -> None:
        """Derive the current block's counters from the canvas (new or restored state)."""
        block = self.response[self.block_slice]
        self._block_unmasked = int(self.block_length - np.count_nonzero(block == self.mask_id))
        self._block_has_eos = bool((block == self.eos_id).any())

    # ------------------------------------------------------------------ sizes
    @property
    def prompt_len(self) -> int:
        return int(self.prompt_ids.shape[0])

    @property
    def num_tokens(self) -> int:
        """Tokens the request occupies in a batch (prompt + response canvas)."""
        return self.prompt_len + self.gen_length

    @property
    def num_blocks(self) -> int:
        return self.gen_length // self.block_length

    @property
    def block_start(self) -> int:
        """Offset of the current block inside the response."""
        return self.block_index * self.block_length

    @property
    def block_slice(self) -> slice:
        return slice(self.block_start, self.block_start + self.block_length)

    # -------------------------------------------------------------- progress
    @property
    def masked(self) -> np.ndarray:
        return self.response == self.mask_id

    @property
    def num_unmasked(self) -> int:
        if self.finished:  # the canvas is complete (answer plus EOS padding)
            return self.gen_length
        return self.block_start + self.unmasked_in_block

    @property
    def unmasked_in_block(self) -> int:
        return self._block_unmasked

    def drop_cache(self) -> None:
        """The request's K/V are no longer where its next step runs (it moved to another
        instance, or its instance died): that step rebuilds them, a recompute step (a
        block-causal request's prefill). Called by the engine and the backends, which own
        where the K/V are; the control plane only reads the consequence."""
        self.block_cached = False

    @property
    def next_kind(self) -> StepKind:
        if self.use_cache and self.block_cached:
            return StepKind.CACHE
        return StepKind.RECOMPUTE

    @property
    def recompute_left_lower_bound(self) -> int:
        """Recompute steps still certainly needed with caching: one per unstarted block
        (block-causal: only the prefill, while the request has no cache)."""
        if self.finished:
            return 0
        if self.block_causal:
            return 0 if self.block_cached else 1
        return self.num_blocks - self.block_index - (1 if self.block_cached else 0)

    @property
    def context_tokens(self) -> int:
        """Tokens the next pass attends over: the prompt and the response up to the end of the
        current block (a bidirectional pass runs the whole canvas, ``num_tokens``)."""
        if not self.block_causal:
            return self.num_tokens
        return self.prompt_len + self.block_start + self.block_length

    def progress_features(self) -> np.ndarray:
        """The 10 threshold-independent predictor features (docs/architecture.md section 4).

        Order: output length, steps done / output length, unmasked / output
        length, block index / blocks, unmasked in block / block length, then
        the five confidence statistics.
        """
        n = float(self.gen_length)
        out = np.empty(5 + N_CONF_STATS, dtype=np.float64)
        out[0] = n
        out[1] = self.steps_done / n
        out[2] = self.num_unmasked / n
        out[3] = self.block_index / self.num_blocks
        out[4] = self.unmasked_in_block / self.block_length
        out[5:] = self.conf_stats
        return out

    # --------------------------------------------------------------- commits
    def apply_step(
        self,
        positions: np.ndarray,
        tokens: np.ndarray,
        threshold: float,
        kind: StepKind,
        conf_stats: np.ndarray,
    ) -> None:
        """Record one finished step that committed ``tokens`` at response ``positions``.

        Shared by the engine (real logits) and the simulator (replayed
        outcomes), so both advance requests with the same bookkeeping: block
        advance, end-of-sequence fill, step counters.
        """
        positions = np.asarray(positions, dtype=np.int64)
        tokens = np.asarray(tokens, dtype=np.int64)
        self.response[positions] = tokens
        self._block_unmasked += int(positions.shape[0])
        if not self._block_has_eos and (tokens == self.eos_id).any():
            self._block_has_eos = True
        self.steps_done += 1
        if kind is StepKind.RECOMPUTE:
            self.recompute_steps_done += 1
        self.block_cached = self.use_cache
        self.append_pending = False  # a prefill or a cache step has written the finished block
        self.thresholds_used.append(float(threshold))
        self.tokens_per_step.append(int(positions.shape[0]))
        self.conf_stats = np.asarray(conf_stats, dtype=np.float64)
        self._settle()

    def _settle(self) -> None:
        """End the answer at a committed EOS and advance past completed blocks.

        Only the current block can have changed: an EOS in an earlier block would
        have ended the request when that block completed.
        """
        if self._block_has_eos:
            block = self.response[self.block_slice]
            first = int(np.flatnonzero(block == self.eos_id)[0])
            # The answer is over once everything before its first EOS is committed:
            # the rest of the canvas becomes padding (EOS), as LLaDA's canvas does.
            if not (block[:first] == self.mask_id).any():
                self.response[self.block_start + first :] = self.eos_id
                self.finished = True
                return
        if self._block_unmasked < self.block_length:
            return
        if self.block_causal:
            # the cache stays exact; the finished block's K/V join it with the next step
            self.append_pending = self.block_cached
        else:
            self.block_cached = False  # the next block starts with a recompute step
        if self.block_index + 1 < self.num_blocks:
            self.block_index += 1
            self._block_unmasked, self._block_has_eos = 0, False  # later blocks are fully masked
        else:
            self.finished = True

    @property
    def answer_limit(self) -> int:
        """Most answer tokens the canvas may return: ``max_tokens``, or the whole canvas."""
        return self.gen_length if self.max_tokens is None else self.max_tokens

    def answer_ids(self) -> np.ndarray:
        """Committed response tokens up to (not including) the first EOS, at most ``answer_limit``."""
        eos = np.flatnonzero(self.response[: self.answer_limit] == self.eos_id)
        end = int(eos[0]) if eos.size else self.answer_limit
        return self.response[:end]

    @property
    def finish_reason(self) -> str | None:
        """OpenAI's ``finish_reason`` of a finished request: ``stop`` when the model ended its
        answer (an EOS within ``answer_limit``), ``length`` when the answer filled the canvas
        or ``max_tokens`` without ending; None while decoding."""
        if not self.finished:
            return None
        return "stop" if (self.response[: self.answer_limit] == self.eos_id).any() else "length"

    # ------------------------------------------------------------- migration
    _ARRAYS = ("prompt_ids", "response", "conf_stats")

    def to_bytes(self) -> bytes:
        """Serialise for migration: a JSON header followed by the raw arrays."""
        header = {
            k: getattr(self, k)
            for k in (
                "request_id",
                "gen_length",
                "block_length",
                "mask_id",
                "eos_id",
                "use_cache",
                "block_index",
                "steps_done",
                "recompute_steps_done",
                "block_cached",
                "finished",
                "thresholds_used",
                "tokens_per_step",
                "max_tokens",
                "block_causal",
                "append_pending",
            )
        }
        header["arrays"] = {}
        payload = b""
        for name in self._ARRAYS:
            arr = np.ascontiguousarray(getattr(self, name))
            header["arrays"][name] = [str(arr.dtype), len(payload), arr.nbytes, list(arr.shape)]
            payload += arr.tobytes()
        head = json.dumps(header).encode()
        return struct.pack("<I", len(head)) + head + payload

    @classmethod
    def from_bytes(cls, blob: bytes) -> RequestState:
        (n,) = struct.unpack_from("<I", blob)
        header = json.loads(blob[4 : 4 + n])
        body = memoryview(blob)[4 + n :]
        arrays = {
            name: np.frombuffer(body[off : off + size], dtype=dtype).reshape(shape).copy()
            for name, (dtype, off, size, shape) in header.pop("arrays").items()
        }
        return cls(**header, **arrays)


def conf_statistics(confidences: np.ndarray) -> np.ndarray:
    """min, q25, median, mean, q75 of a 1-D array of confidences.

    The quantiles are numpy's default (linear interpolation), computed on one sorted
    copy: ``np.quantile`` costs several times more on the few dozen values of a
    block, and this runs once per request per step.
    """
    c = np.sort(np.asarray(confidences, dtype=np.float64))
    n = c.size
    if n == 0:
        return np.zeros(N_CONF_STATS)

    def q(p: float) -> float:
        pos = p * (n - 1)
        lo = int(pos)
        hi = min(lo + 1, n - 1)
        return float(c[lo] + (c[hi] - c[lo]) * (pos - lo))

    return np.array([c[0], q(0.25), q(0.5), float(c.mean()), q(0.75)])


def new_request(
    request_id: str,
    prompt_ids,
    gen_length: int,
    block_length: int,
    mask_id: int,
    eos_id: int,
    use_cache: bool = True,
    max_context: int | None = None,
    max_tokens: int | None = None,
    block_causal: bool = False,
) -> RequestState:
    """Build a fresh request, checking it against the model's context limit."""
    state = RequestState(
        request_id=request_id,
        prompt_ids=prompt_ids,
        gen_length=gen_length,
        block_length=block_length,
        mask_id=mask_id,
        eos_id=eos_id,
        use_cache=use_cache,
        max_tokens=max_tokens,
        block_causal=block_causal,
    )
    if max_context is not None and state.num_tokens > max_context:
        raise ValueError(
            f"request {request_id!r} needs {state.num_tokens} tokens (prompt {state.prompt_len} + "
            f"gen_length {gen_length}) but the model's context limit is {max_context}: "
            "shorten the prompt or lower gen_length"
        )
    return state
