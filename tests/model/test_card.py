"""The model card lists every training run behind a checkpoint and flags an under-trained one."""
import math
from pathlib import Path

from dilaserve.model.card import render, training_stages
from dilaserve.suite_decoding import QualityRow


def _log(steps, minutes, lr, parent=None):
    log = {"steps": steps, "minutes": minutes, "config": {"tasks": ["list"], "task_stages": ["1:list"], "lr": lr,
                                                           "curriculum_steps": 0, "threads": 1}}
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


def test_the_card_splits_accuracy_by_task():
    rows = [QualityRow(0.9, 0.9, 10.0, 30, {"arith": 0.8, "list": 1.0}), QualityRow(0.5, 0.3, 6.0, 30, {"arith": 0.1, "list": 0.5})]
    card = render(Path("dila-tiny"), rows, 10, _log(50, 1.0, 1e-3))
    assert "| threshold | accuracy | mean steps | `arith` | `list` |" in card
    assert "| 0.9 | 0.900 | 10.00 | 0.80 | 1.00 |" in card and "| 0.5 | 0.300 | 6.00 | 0.10 | 0.50 |" in card


def test_the_model_package_imports_nothing_above_it():
    """The engine builds on the model; the card's measurement (which decodes with the
    engine) lives in dilaserve.model_card, so no module of dilaserve/model imports upward."""
    import ast

    import dilaserve.model

    above = ("dilaserve.engine", "dilaserve.suite_decoding", "dilaserve.model_card", "dilaserve.predict",
             "dilaserve.control", "dilaserve.schedule", "dilaserve.serve", "dilaserve.sim", "dilaserve.eval")
    offenders = []
    for path in Path(dilaserve.model.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.name}: {n}" for n in names if n.startswith(above)]
    assert not offenders
