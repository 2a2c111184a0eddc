"""The whole graph on a micro configuration, into a temp folder."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dilaserve import artifacts
from dilaserve.engine.state import StepKind
from dilaserve.predict.base import PredictionBatch
from dilaserve.predict.schema import validate_step_table

from .micro import MICRO_RUN_CONFIG, materialize_micro

pytestmark = pytest.mark.integration  # materialises the Dagster graph


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The micro graph, recorded in a Dagster home of its own (as ``python -m pipelines``
    keeps one), so that its asset pages can be opened."""
    import dagster as dg

    from pipelines.__main__ import write_instance_settings

    folder = tmp_path_factory.mktemp("pipeline")
    home = folder / "dagster_home"
    home.mkdir()
    write_instance_settings(home)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        result = materialize_micro(folder, instance=instance)
    return result, folder / "artifacts"


def test_every_asset_materialises_and_every_check_passes(built):
    result, _ = built
    assert result.success
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert len(materialized) == 14
    checks = result.get_asset_check_evaluations()
    assert {c.check_name for c in checks} == {
        "step_features_schema",
        "predictor_beats_oneshot",
        "analytic_profiles_calibrated",
        "published_tokens_per_step_match",
        "published_predictor_beats_oneshot",
    }
    assert all(c.passed for c in checks), [(c.check_name, c.metadata) for c in checks]


def test_artifacts_load_through_the_runtime_loaders(built):
    _, root = built
    table = validate_step_table(artifacts.load_step_table(root))
    assert table["request_id"].n_unique() == MICRO_RUN_CONFIG["ops"]["prompt_set"]["config"]["n_requests"]

    predictor, oneshot = artifacts.load_predictor(root), artifacts.load_oneshot(root)
    batch = PredictionBatch.build(["a", "b"], np.array([[64, 0, 0, 0, 0, 0, 0, 0, 0, 0]] * 2, float), [0.5, 0.9])
    assert predictor.predict(batch).shape == oneshot.predict(batch).shape == (2, 2)

    measured = artifacts.load_profile("measured", root)
    assert measured.tp_degrees == (1, 2) and measured.latency(2, 64, StepKind.CACHE) > 0
    assert artifacts.available_profiles(root) == ["measured", "llada-8b-h100", "llada-8b-h100-block"]
    assert artifacts.load_profile("llada-8b-h100", root).tp_degrees == (1, 2, 4)
    block = artifacts.load_profile("llada-8b-h100-block", root)
    assert block.tp_degrees == (1, 2, 4)

    assert set(artifacts.load_step_dynamics(root).mean_tokens_per_step()) == {0.5, 0.9}
    assert [r.threshold for r in artifacts.load_threshold_quality(root).fixed] == [0.5, 0.9]
    for png in ("predictor/error_by_decile.png", "profiles/measured.png", "profiles/analytic/analytic.png"):
        assert (root / png).read_bytes()[:4] == b"\x89PNG"


def test_published_law_loads_from_its_own_folder_and_meets_the_published_speed(built):
    from dilaserve.control.step_law import StepLaw
    from dilaserve.predict.published import PUBLISHED_TOKENS_PER_STEP

    _, root = built
    law = artifacts.law_root(artifacts.PUBLISHED_LAW, root)
    assert law == root / "laws" / "llada-8b-published"
    steps = StepLaw.from_dynamics(artifacts.load_step_dynamics(law), 32)
    for t in (0.5, 0.9):
        assert steps.tokens_per_step(t) == pytest.approx(PUBLISHED_TOKENS_PER_STEP[t], rel=0.03)
    validate_step_table(artifacts.load_step_table(law))
    quality = artifacts.load_threshold_quality(law)
    assert [r.accuracy for r in quality.fixed] == pytest.approx([0.755, 0.785])
    assert "not a measurement" in quality.meta["label"]
    assert artifacts.load_predictor(law).booster.num_trees() > 0


def test_predictor_beats_oneshot_on_micro_data(built):
    _, root = built
    overall = {r["predictor"]: r for r in artifacts.load_predictor_evaluation(root)["overall"]}
    assert overall["lightgbm"]["rel_err"] < overall["oneshot"]["rel_err"]
    assert overall["lightgbm"]["mae"] < overall["oneshot"]["mae"]


def test_missing_artifact_names_the_command(tmp_path):
    with pytest.raises(artifacts.MissingArtifactError, match=r"dagster asset materialize .*\+step_predictor"):
        artifacts.load_predictor(tmp_path)


def test_asset_pages_show_plots_as_images_and_rounded_numbers(built):
    import dagster as dg

    result, _ = built
    metadata = {
        e.asset_key.to_user_string(): e.event_specific_data.materialization.metadata
        for e in result.get_asset_materialization_events()
    }
    from pipelines.metadata import INLINE_MD_LIMIT

    _, root = built
    home = root.parent / "dagster_home"
    for asset in ("step_predictor", "measured_profile", "analytic_profiles"):
        # The plot is short markdown linking the PNG the webserver serves from the instance's
        # compute-log folder: the asset page shows it in place.
        plot = metadata[asset]["plot"]
        assert isinstance(plot, dg.MarkdownMetadataValue) and len(plot.value) < INLINE_MD_LIMIT, asset
        link = re.fullmatch(r"!\[[^]]+\]\(/logs/dilaserve-plots/([\w.-]+)/png\)", plot.value)
        assert link, plot.value
        assert (home / "storage" / "dilaserve-plots" / f"{link.group(1)}.png").read_bytes()[:4] == b"\x89PNG"
        # The chart is short enough for the asset page to show it in place, not behind a link.
        chart = metadata[asset]["chart"]
        assert isinstance(chart, dg.MarkdownMetadataValue) and len(chart.value) < INLINE_MD_LIMIT, asset
        assert chart.value.count("\n|") >= 3 and "\u2588" in chart.value, chart.value
        # Paths inside the repository are shown relative to it; the tests' temp folders stay absolute.
        for key in ("plot_path", "path", "folder"):
            if key in metadata[asset]:
                assert metadata[asset][key].value.endswith(".png") or "/" in metadata[asset][key].value

    def floats(value):
        if isinstance(value, dict):
            return [f for v in value.values() for f in floats(v)]
        if isinstance(value, list):
            return [f for v in value for f in floats(v)]
        return [value] if isinstance(value, float) else []

    shown = [
        (asset, f)
        for asset, md in metadata.items()
        for v in md.values()
        for f in floats(getattr(v, "value", getattr(v, "data", None)))
    ]
    assert shown and all(f == float(f"{f:.4g}") for _, f in shown), [s for s in shown if s[1] != float(f"{s[1]:.4g}")]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium (apt-get install -y chromium)")
def test_the_step_predictor_page_shows_its_plot_in_a_real_browser(built, tmp_path):
    # The Dagster webserver on the micro run's home, its asset page opened in headless
    # Chromium as a first visit: the plot has loaded with no click, and no pop-up covers it.
    _, root = built
    shot = tmp_path / "step_predictor.png"
    script = Path(__file__).resolve().parents[2] / "scripts" / "dagster_screenshot.py"
    home = root.parent / "dagster_home"
    proc = subprocess.run(
        [sys.executable, str(script), "--home", str(home), "--out", str(shot)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["plot_shown"] and not seen["nux_dialog"], seen
    width, height = seen["plot_size"]
    assert 400 <= width <= 760 and height > 200, seen  # the page's width, no sideways scroll
    assert shot.read_bytes()[:4] == b"\x89PNG"
