"""Which saved run the evaluation notebook shows first, and how it names it."""

import datetime as dt
from pathlib import Path

from dilaserve.eval.saved_runs import SavedRun, find_runs, preferred


def _run(experiment, quick, hour):
    return SavedRun(
        Path(f"results/{experiment}"),
        experiment,
        quick,
        dt.datetime(2026, 12, 1, hour, tzinfo=dt.timezone.utc),
        ("paper",),
        ("dilaserve",),
        3372,
        (),
    )


def test_a_full_run_is_preferred_to_a_newer_quick_one():
    full, quick, other = _run("trace", False, 9), _run("trace", True, 11), _run("frontier", True, 12)
    assert preferred([other, quick, full], "trace") is full
    assert preferred([other, quick], "trace") is quick
    assert preferred([other, quick, full], "a-new-experiment") is full  # unknown name: still a full run first
    assert preferred([], "trace") is None
    assert full.label == "trace: full run of 2026-12-01 09:00 UTC, paper, 3,372 requests"
    assert _run("trace", None, 9).kind == "unknown kind of"


def test_find_runs_skips_folders_without_a_summary(tmp_path):
    (tmp_path / "trace").mkdir()
    (tmp_path / "quick" / "trace").mkdir(parents=True)
    (tmp_path / "quick" / "trace" / "summary.parquet").write_text("not parquet")
    assert find_runs(tmp_path) == []
