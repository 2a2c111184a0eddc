"""Helpers shared by the benchmarks: a machine description and JSON output."""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Callable, Sequence


def machine_info() -> dict:
    """Describe the host so numbers from different machines are not compared blindly."""
    info = {
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
        if model:
            info["cpu"] = model
    except OSError:
        pass
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return info


def ratio(num: float, den: float, digits: int = 3) -> float | None:
    """``num / den`` rounded, or None (JSON null) when there is nothing to divide by."""
    return round(num / den, digits) if den else None


def emit(result: dict, as_json: bool) -> None:
    """Print a readable summary unless ``as_json``; the last line is always the JSON object."""
    if not as_json:
        for k, v in result.items():
            print(f"{k}: {v}")
    print(json.dumps(result))


def interleaved(measures: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Each measurement ``repeats`` times, in turn (A, B, A, B, ...), so that another process
    running on the machine for a while slows both sides of a ratio, not just one."""
    out: dict[str, list[float]] = {k: [] for k in measures}
    for _ in range(repeats):
        for k, fn in measures.items():
            out[k].append(fn())
    return out


def median_ratio(num: Sequence[float], den: Sequence[float], digits: int = 3) -> tuple[float | None, float | None]:
    """(median, spread) of the per-repetition ratios ``num[i] / den[i]``; the spread is their
    max - min (0 for one repetition). (None, None) when a denominator is zero."""
    if not num or any(d == 0 for d in den):
        return None, None
    r = [n / d for n, d in zip(num, den)]
    return round(float(statistics.median(r)), digits), round(max(r) - min(r), digits)
