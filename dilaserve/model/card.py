"""A checkpoint's model card: training config and time, accuracy and steps per threshold.

This module only renders the card from a training log and a speed-quality table; the
measurement, which decodes the task suite with the engine, is ``python -m
dilaserve.model_card`` (above the engine, so the model package never imports it).
"""

from __future__ import annotations

import json
import platform
from pathlib import Path


def training_stages(log: dict) -> list[dict]:
    """The runs behind a checkpoint, oldest first (``init_from_log`` links each to the one before)."""
    chain = []
    while log:
        chain.append(log)
        log = log.get("init_from_log") or {}
    return chain[::-1]


def _cpu(st: dict) -> str:
    """A run's CPU minutes where it recorded them (older runs recorded wall time only)."""
    return f"{float(st['cpu_minutes']):.1f}" if st.get("cpu_minutes") is not None else ""


def _intro(path: Path, block_length: int | None) -> list[str]:
    """The card's title and first paragraph: the bidirectional default or its block-diffusion twin."""
    if block_length is None:
        return [
            f"# {path.name}: the embedded default masked-diffusion model",
            "",
            "A small HF-native masked-diffusion transformer (`DiLaForMaskedDiffusion`: bidirectional attention",
            "over the response, a prompt that attends only to itself, rotary positions, SwiGLU, tied embeddings)",
            "trained by `python -m dilaserve.model.train` on the synthetic task suite (`list`, `pairs`, `arith`;",
            "`dilaserve/tasks/`).",
        ]
    return [
        f"# {path.name}: the embedded block-diffusion model",
        "",
        "The embedded architecture (`DiLaForMaskedDiffusion`, rotary positions, SwiGLU, tied embeddings) in",
        f"block-causal mode (`block_causal`, blocks of {block_length} tokens): a token attends to the prompt, to",
        "earlier blocks and to its own block, so the prompt and every finished block have an exact K/V cache and",
        'only the current block is denoised (docs/architecture.md, "Block-diffusion models"). Trained by',
        "`python -m dilaserve.model.train --block-causal` on the synthetic task suite (`list`, `pairs`, `arith`;",
        "`dilaserve/tasks/`).",
    ]


def render(
    path: Path,
    rows,
    per_task: int,
    log: dict,
    canvas: dict | None = None,
    block_length: int | None = None,
    temperature: float = 1.0,
) -> str:
    """The card's Markdown; ``block_length`` is set for a block-causal checkpoint (None: bidirectional),
    ``temperature`` is the config's ``logit_temperature``."""
    cfg = log.get("config", {})
    lines = _intro(path, block_length) + [
        "",
        "## Training",
        "",
        f"- last run: {log.get('steps')} steps, wall time {log.get('minutes')} min on {platform.machine()} CPU"
        + (f" ({_cpu(log)} CPU minutes)" if _cpu(log) else ""),
        f"- its config: `{json.dumps({k: v for k, v in cfg.items() if k != 'out'})}`",
        f"- confidence temperature {temperature:g}"
        + (
            ": fitted after training by `python -m dilaserve.model.calibrate` (held-out NLL on decode-shaped canvases)"
            if temperature != 1.0
            else " (uncalibrated: the logits as trained)"
        ),
    ]
    stages = training_stages(log)
    if len(stages) > 1:
        total_steps = sum(st.get("steps") or 0 for st in stages)
        total_min = sum(st.get("minutes") or 0 for st in stages)
        timed = [st for st in stages if _cpu(st)]
        cpu = (
            f" The runs that recorded their CPU time ({', '.join(str(stages.index(st) + 1) for st in timed)}) took "
            f"{sum(float(st['cpu_minutes']) for st in timed):.1f} CPU minutes: on a shared machine a run gets "
            "less CPU than its wall time."
            if timed
            else ""
        )
        lines += [
            "",
            f"Trained in {len(stages)} runs, each continuing from the one before: {total_steps} steps, "
            f"{total_min:.1f} min in all.{cpu}",
            "",
            "| run | steps | minutes | CPU minutes | tasks | task stages | curriculum steps | lr | threads | note |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for i, st in enumerate(stages, 1):
            c = st.get("config", {})
            lines.append(
                f"| {i} | {st.get('steps')} | {float(st.get('minutes') or 0):.1f} | {_cpu(st)} | {' '.join(c.get('tasks', []))} | "
                f"{' '.join(c.get('task_stages', []))} | {c.get('curriculum_steps')} | {c.get('lr')} | {c.get('threads')} | "
                f"{st.get('note', '')} |"
            )
    lines += [
        "",
        f"## Quality ({per_task} prompts per task, seed 2024, "
        + ("exact block cache" if block_length else "dual cache")
        + " on)",
        "",
    ]
    tasks = sorted({t for r in rows for t in r.by_task})
    lines += [
        "| threshold | accuracy | mean steps | tokens per step | " + " | ".join(f"`{t}`" for t in tasks) + " |",
        "| --- | --- | --- | --- |" + " --- |" * len(tasks),
    ]
    lines += [
        f"| {r.label} | {r.accuracy:.3f} | {r.mean_steps:.2f} | {r.tokens_per_step:.2f} | "
        + " | ".join(f"{r.by_task.get(t, 0):.2f}" for t in tasks)
        + " |"
        for r in rows
    ]
    lines += [
        "",
        "`sequential` commits one token per step: the quality reference for the thresholds. Tokens per",
        "step count every canvas position a step commits (answer and EOS); the task columns are the",
        "accuracy per task, the per-task quality curve.",
        "",
    ]
    if canvas:
        lines += [
            "## Any canvas (threshold 0.9)",
            "",
            "The canvas at k times each task's generation length (capped at the context), the rest left",
            "to EOS, as a client's generous `max_tokens` leaves it:",
            "",
            "| canvas | accuracy | " + " | ".join(f"`{t}`" for t in tasks) + " |",
            "| --- | --- |" + " --- |" * len(tasks),
        ]
        lines += [
            f"| {k}x | {v['accuracy']:.3f} | " + " | ".join(f"{v['by_task'].get(t, 0):.2f}" for t in tasks) + " |"
            for k, v in canvas.items()
        ]
        lines += [""]
    best = max((r.accuracy for r in rows if r.label == "0.9"), default=0.0)
    if best < 0.9:
        lines += [
            "## Status: under-trained",
            "",
            f"Accuracy at threshold 0.9 is {best:.1%}, below the 90% this checkpoint is meant to reach. The",
            "steps fall with the threshold as they should, but too many answers are wrong. Train longer",
            "(`python -m dilaserve.model.train --init-from` this folder) and re-run this card.",
            "",
        ]
    return "\n".join(lines)
