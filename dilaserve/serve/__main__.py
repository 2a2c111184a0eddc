"""``python -m dilaserve.serve [flags]``: serve a diffusion LM over an OpenAI-compatible API.

With no flags it serves the embedded default model on this machine with a small
cluster of CPU instances (two TP-1 instances, reconfigurable to one TP-2).

    curl http://127.0.0.1:8000/v1/completions -H 'Content-Type: application/json' \\
      -d '{"model": "dila-tiny", "prompt": "list : c a f b", "max_tokens": 32, "slo_ms": 5000}'
"""

from __future__ import annotations

import logging
import os
import sys

from dilaserve.utils.cli import parse_dataclass

from .config import ServeConfig


def main(argv=None) -> int:
    cfg = parse_dataclass(ServeConfig, argv, description=__doc__, prog="python -m dilaserve.serve")
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from dilaserve.cluster import ray_local
    from dilaserve.utils.net import bound_socket

    from .api import build_app
    from .control_setup import connect_ray
    from .drain import DrainingServer
    from .runtime import ServingRuntime

    try:
        runtime = ServingRuntime(cfg)
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        # Bound before Ray starts, which takes ephemeral ports of its own; and a taken port is
        # reported before a cluster is started for nothing.
        sock = bound_socket(cfg.host, cfg.port)
    except OSError as e:
        print(f"error: {e.strerror}", file=sys.stderr)
        return 2
    started_ray = connect_ray(cfg)
    try:
        # SIGINT/SIGTERM: new requests get 503 while in-flight ones finish, then the lifespan
        # frees the cluster (DrainingServer).
        config = uvicorn.Config(
            build_app(runtime),
            host=cfg.host,
            port=cfg.port,
            log_level=cfg.log_level,
            timeout_graceful_shutdown=int(cfg.drain_timeout_s) + 5,
        )
        DrainingServer(config, runtime).run(sockets=[sock])
    finally:
        if not ray_local.disconnect(started_ray):
            # Ray's exit hook would wait a minute on the dead GCS, then print an error: skip it.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
