"""The model card lists every training run behind a checkpoint and flags an under-trained one."""

import math
from pathlib import Path

from dilaserve.model.card import render, training_stages
from dilaserve.suite_decoding import QualityRow


def _log(steps, minutes, lr, parent=None):
    log = {
        "steps": steps,
        "minutes": minutes,
        "config": {"tasks": ["list"], "task_stages": ["1:list"], "lr": lr, "curriculum_steps": 0, "threads": 1},
    }
    if parent:
        log["init_from_log"] = parent
    return log


def test_stages_are_listed_oldest_first_with_totals():
    log = _log(300, 5.0, 1e-3, _log(200, 4.0, 2e-3, _log(100, 1.5, 3e-3)))
    assert [s["steps"] for s in training_stages(log)] == [100, 200, 300]
    rows = [QualityRow(0.9, 0.95, 10.0, 30), QualityRow(0.5, 0.6, 6.0, 30), QualityRow(math.inf, 0.97, 20.0, 30)]
    card = render(Path("dila-tiny"), rows, 10, log)
    assert "Trained in 3 runs" in card and "600 steps, 10.5 min in all" in card
    assert "| 1 | 100 | 1.5 |" in card and "| 3 | 300 | 5.0 |" in card
    assert "under-trained" not in card


def test_a_weak_checkpoint_is_called_under_trained():
    rows = [QualityRow(0.9, 0.4, 10.0, 30), QualityRow(math.inf, 0.5, 20.0, 30)]
    card = render(Path("dila-tiny"), rows, 10, _log(50, 1.0, 1e-3))
    assert "## Status: under-trained" in card and "40.0%" in card
    assert "Trained in" not in card


def test_the_card_says_whether_the_confidences_are_calibrated():
    rows = [QualityRow(0.9, 0.95, 10.0, 30)]
    assert "confidence temperature 1 (uncalibrated" in render(Path("dila-tiny"), rows, 10, _log(50, 1.0, 1e-3))
    card = render(Path("dila-tiny"), rows, 10, _log(50, 1.0, 1e-3), temperature=1.15)
    assert "confidence temperature 1.15: fitted after training by `python -m dilaserve.model.calibrate`" in card


def test_the_card_splits_accuracy_by_task():
    rows = [
        QualityRow(0.9, 0.9, 10.0, 30, {"arith": 0.8, "list": 1.0}),
        QualityRow(0.5, 0.3, 6.0, 30, {"arith": 0.1, "list": 0.5}),
    ]
    rows[0].tokens_per_step, rows[1].tokens_per_step = 3.5, 7.0
    canvas = {
        "1": {"accuracy": 0.9, "by_task": {"arith": 0.8, "list": 1.0}},
        "3": {"accuracy": 0.85, "by_task": {"arith": 0.7, "list": 1.0}},
    }
    card = render(Path("dila-tiny"), rows, 10, _log(50, 1.0, 1e-3), canvas)
    assert "| threshold | accuracy | mean steps | tokens per step | `arith` | `list` |" in card
    assert (
        "| 0.9 | 0.900 | 10.00 | 3.50 | 0.80 | 1.00 |" in card and "| 0.5 | 0.300 | 6.00 | 7.00 | 0.10 | 0.50 |" in card
    )
    assert "| canvas | accuracy | `arith` | `list` |" in card and "| 3x | 0.850 | 0.70 | 1.00 |" in card


def test_the_card_states_cpu_time_where_runs_recorded_it():
    log = _log(300, 5.0, 1e-3, _log(200, 4.0, 2e-3))
    log["cpu_minutes"] = 3.25
    card = render(Path("dila-tiny"), [QualityRow(0.9, 0.95, 10.0, 30)], 10, log)
    assert "| 2 | 300 | 5.0 | 3.2 |" in card and "| 1 | 200 | 4.0 |  |" in card
    assert "(2) took 3.2 CPU minutes" in card


def test_the_model_package_imports_nothing_above_it():
    """The engine builds on the model; the card's measurement (which decodes with the
    engine) lives in dilaserve.model_card, so no module of dilaserve/model imports upward."""
    import ast

    import dilaserve.model

    above = (
        "dilaserve.engine",
        "dilaserve.suite_decoding",
        "dilaserve.model_card",
        "dilaserve.predict",
        "dilaserve.control",
        "dilaserve.schedule",
        "dilaserve.serve",
        "dilaserve.sim",
        "dilaserve.eval",
    )
    offenders = []
    for path in Path(dilaserve.model.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{path.name}: {n}" for n in names if n.startswith(above)]
    assert not offenders


def test_a_block_causal_checkpoint_gets_the_same_table_and_says_what_it_is():
    rows = [QualityRow(0.9, 0.92, 9.0, 30, {"arith": 0.9, "list": 1.0}), QualityRow(math.inf, 0.95, 40.0, 30)]
    card = render(Path("dila-tiny-bd"), rows, 10, _log(50, 1.0, 1e-3), None, block_length=32)
    assert card.startswith("# dila-tiny-bd: the embedded block-diffusion model") and "blocks of 32 tokens" in card
    assert "exact block cache on" in card and "dual cache" not in card
    assert "| threshold | accuracy | mean steps | tokens per step | `arith` | `list` |" in card
    assert "| 0.9 | 0.920 | 9.00 |" in card and "Any canvas" not in card


def test_the_card_command_measures_a_block_causal_checkpoint(tiny_bd_checkpoint, tmp_path, capsys):
    import shutil

    from dilaserve.model_card import main

    folder = shutil.copytree(tiny_bd_checkpoint, tmp_path / "bd")  # the card is written into the folder
    assert main([str(folder), "--per-task", "1"]) == 0
    card = (folder / "README.md").read_text()
    assert "embedded block-diffusion model" in card and "blocks of 8 tokens" in card
    assert "| sequential |" in card and "Any canvas" not in card
