"""``python -m dilaserve.bench migration --checkpoint DIR [--json]``: price moving a
block-causal request's cache against rebuilding it.

A migrated block-causal request can continue on its destination in two ways
(docs/architecture.md, "Block-diffusion models"):

* **ship** its exact cache (prompt + finished blocks): serialise it
  (``dilaserve.engine.cache_blob``, as a migration does), send it over a loopback TCP
  socket, deserialise it; the destination then runs an ordinary cache step;
* **rebuild** it: the destination's first step is one prefill of the prompt, the
  finished blocks and the current block, which is also that step's denoising pass.

For a request with 1, 2, 4 and 6 finished blocks it reports, as medians over repeats:
``cache_bytes``, ``ship_ms`` (serialise + send + receive + deserialise),
``cache_step_ms``, ``ship_total_ms`` (ship + the cache step that follows),
``prefill_ms`` (the rebuilding step) and ``rebuild_over_ship``
(``prefill_ms / ship_total_ms``: above 1, shipping is cheaper), plus the ``machine``.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import struct
import threading
import time

import numpy as np
import torch

from dilaserve.engine import DenoisingEngine
from dilaserve.engine.cache_blob import cache_from_bytes, cache_to_bytes
from dilaserve.engine.state import RequestState

from .common import emit, machine_info

PROMPT = "list : a b c"
FINISHED_BLOCKS = (1, 2, 4, 6)


def mid_answer(engine: DenoisingEngine, finished: int) -> RequestState:
    """A block-causal request with ``finished`` complete blocks (answer words, no EOS) and a
    fully masked current block, as it stands between two steps."""
    bl = engine.lm.block_length
    st = engine.new_request(PROMPT, (finished + 1) * bl, bl)
    words = np.array(engine.encode("a b c d e f g h"), dtype=np.int64)
    st.response[: finished * bl] = np.resize(words, finished * bl)
    st.block_index = finished
    st.block_cached, st.append_pending = True, True
    # only costs are measured: a request that never ends on EOS keeps its cache for the next step
    st.eos_id = -1
    return RequestState.from_bytes(st.to_bytes())  # recount the block from the canvas


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError("the peer closed the socket mid-message")
        got += k
    return buf


class Loopback:
    """A connected TCP pair on 127.0.0.1 (a free port), the cheapest real network hop."""

    def __init__(self) -> None:
        server = socket.create_server(("127.0.0.1", 0))
        accepted: list = []
        t = threading.Thread(target=lambda: accepted.append(server.accept()[0]))
        t.start()
        self.send = socket.create_connection(server.getsockname())
        t.join()
        server.close()
        self.recv = accepted[0]

    def ship(self, kv: torch.Tensor) -> torch.Tensor:
        """Serialise ``kv`` as a migration does, send it, receive it on the other end and
        rebuild the tensor."""
        payload = cache_to_bytes(kv)
        sender = threading.Thread(target=lambda: self.send.sendall(struct.pack("<Q", len(payload)) + payload))
        sender.start()
        (n,) = struct.unpack("<Q", _recv_exact(self.recv, 8))
        body = bytes(_recv_exact(self.recv, n))
        sender.join()
        return cache_from_bytes(body)

    def close(self) -> None:
        self.send.close()
        self.recv.close()


def _ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return 1000 * (time.perf_counter() - t0)


def price(engine: DenoisingEngine, finished: int, repeats: int, link: Loopback) -> dict:
    """Ship vs rebuild for a request with ``finished`` blocks done (medians over ``repeats``)."""
    base = mid_answer(engine, finished)
    blob = base.to_bytes()
    prefill, cache_step, ship = [], [], []
    kv = None
    for _ in range(repeats + 1):  # the first round warms up
        st = engine.restore(blob)
        prefill.append(_ms(lambda st=st: engine.step([st], [1.0])))  # the rebuilding prefill
        kv = engine.cache_of(st.request_id)
        cache_step.append(_ms(lambda st=st: engine.step([st], [1.0])))
        ship.append(_ms(lambda kv=kv: link.ship(kv)))
        engine.release(st.request_id)
    shipped = link.ship(kv)
    if not torch.equal(shipped, kv):
        raise RuntimeError("the shipped cache differs from the sent one")
    med = {name: statistics.median(v[1:]) for name, v in (("p", prefill), ("c", cache_step), ("s", ship))}
    total = med["s"] + med["c"]
    return {
        "context_tokens": base.context_tokens,
        "cached_tokens": int(kv.shape[3]),
        "cache_bytes": int(kv.numel() * kv.element_size()),
        "ship_ms": round(med["s"], 3),
        "cache_step_ms": round(med["c"], 3),
        "ship_total_ms": round(total, 3),
        "prefill_ms": round(med["p"], 3),
        "rebuild_over_ship": round(med["p"] / total, 3),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.bench migration",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--checkpoint", required=True, help="a block-causal checkpoint folder")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print only the JSON line")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1 is steadiest on a shared machine)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    engine = DenoisingEngine.from_pretrained(args.checkpoint)
    if not engine.lm.block_causal:
        p.error(f"{args.checkpoint} is not a block-causal checkpoint: its requests have no exact cache to ship")
    room = (engine.lm.max_context - len(engine.encode(PROMPT))) // engine.lm.block_length - 1
    link = Loopback()
    try:
        by_blocks = {str(k): price(engine, k, args.repeats, link) for k in FINISHED_BLOCKS if k <= room}
    finally:
        link.close()
    emit(
        {
            "by_finished_blocks": by_blocks,
            "checkpoint": engine.lm.name,
            "repeats": args.repeats,
            "machine": machine_info(),
        },
        args.json,
    )
    return 0
