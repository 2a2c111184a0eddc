"""``python -m dilaserve.bench SUBCOMMAND [args]``: dispatch to ``dilaserve.bench.SUBCOMMAND``.

Each subcommand is a module in this package exposing ``main(argv: list[str]) -> int``.
Modules are imported only when their subcommand runs, so a benchmark's heavy imports
(torch, Ray, LightGBM) cost nothing to the others. Register a new one in ``SUBCOMMANDS``.
"""

from __future__ import annotations

import importlib
import sys

#: subcommand -> one-line description; the module is ``dilaserve.bench.<subcommand>``.
SUBCOMMANDS: dict[str, str] = {
    "burst": "a burst after a quiet spell: step gaps, SLOs of the admitted, refusals, control CPU",
    "capacity": "predicted vs simulated saturation throughput of a static cluster",
    "chaos": "requests in flight while instance workers are killed and the cluster reconfigured",
    "control": "scheduler step handling and reconfiguration ILP solve times",
    "engine": "denoising engine step latency",
    "frontend": "HTTP front end responsiveness under a slow reconfiguration solve and a huge body",
    "migration": "shipping a block-causal request's cache vs rebuilding it by one prefill",
    "predictor": "remaining-step predictor accuracy and latency",
    "quality": "replay-mode quality estimate vs model-mode graded quality",
    "sim": "simulator throughput",
    "serve": "HTTP serving latency",
    "soak": "steady load for N minutes: memory growth, lost requests, latency, event-loop stalls",
}


def usage() -> str:
    lines = ["usage: python -m dilaserve.bench SUBCOMMAND [args]", "", "subcommands:"]
    lines += [f"  {name:<10} {desc}" for name, desc in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"unknown benchmark {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(f"dilaserve.bench.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"dilaserve.bench.{name}":
            raise
        print(f"benchmark {name!r} is not available in this checkout", file=sys.stderr)
        return 2
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
