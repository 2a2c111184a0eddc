"""The client's connection pool: one per process, shared by threads, rebuilt in a forked
child (a child must not write to its parent's sockets)."""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import ThreadPoolExecutor

from dilaserve.serve import client


def _child_pool(parent_id: int, out) -> None:
    pool = client._http()
    out.put((id(pool) != parent_id, client._pool[0] == os.getpid()))


def test_threads_share_one_pool_and_a_forked_child_builds_its_own():
    with ThreadPoolExecutor(8) as ex:
        pools = set(ex.map(lambda _: id(client._http()), range(32)))
    assert pools == {id(client._http())}
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_child_pool, args=(id(client._http()), out))
    child.start()
    fresh, owned = out.get(timeout=30)
    child.join(30)
    assert fresh and owned and child.exitcode == 0
