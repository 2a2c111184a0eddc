"""Measure a checkpoint and write its model card (``README.md`` in the checkpoint folder).

    python -m dilaserve.model_card data/models/dila-tiny [--per-task 50]

The numbers are measured here, on the task suite, with the engine (dual cache on), and
next to them the one-token-per-step decode of the same checkpoint; then the accuracy at
0.9 with the canvas at 1x, 2x and 3x each task's generation length (not for a
block-diffusion checkpoint, whose blocks never see the canvas after them). The card's text is
:func:`dilaserve.model.card.render`.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS
from dilaserve.engine import DenoisingEngine
from dilaserve.model.card import render
from dilaserve.suite_decoding import accuracy_by_canvas, quality_table
from dilaserve.tasks import task_suite

#: The card lists the candidate thresholds from the highest (its quality reference) down.
THRESHOLDS = tuple(sorted(CANDIDATE_THRESHOLDS, reverse=True))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m dilaserve.model_card", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("checkpoint")
    p.add_argument("--per-task", type=int, default=50, help="prompts per task (default 50)")
    args = p.parse_args(argv)
    path = Path(args.checkpoint)
    engine = DenoisingEngine.from_pretrained(path)
    suite = task_suite(args.per_task, seed=2024)
    rows = quality_table(engine, suite, list(THRESHOLDS) + [math.inf])
    # a block-causal answer never sees the canvas beyond its block: the 1x decode is the start of
    # the 2x one, so the canvas table says nothing there
    canvas = None if engine.lm.block_causal else accuracy_by_canvas(engine, suite)
    log_path = path / "train_log.json"
    log = json.loads(log_path.read_text()) if log_path.exists() else {}
    temperature = getattr(engine.lm.model.config, "logit_temperature", 1.0)
    card = render(path, rows, args.per_task, log, canvas, engine.lm.block_length, temperature)
    (path / "README.md").write_text(card)
    print((path / "README.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
