"""Every notebook runs headless on tiny inputs and passes `marimo check`. The three report
notebooks are run by `marimo export html`, and the page they export shows no long float."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from .tiny_inputs import build_eval_results, build_threshold_artifacts

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
NAMES = ("thresholds", "reconfig", "evaluation", "serve_app")

pytestmark = pytest.mark.integration  # runs marimo (and, for the app, a server)


def _run_clean(cmd: list[str], env: dict, timeout: float) -> str:
    """Run ``cmd`` from the repo root; returns stdout + stderr, asserts a clean exit."""
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Traceback" not in out, out[-4000:]
    return out


def run_notebook(name: str, *args: str, artifacts: Path | None = None, timeout: float = 120) -> str:
    """``python notebooks/NAME.py ARGS``; returns stdout + stderr, asserts a clean exit."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    if artifacts is not None:
        env["DILASERVE_ARTIFACTS"] = str(artifacts)
    return _run_clean([sys.executable, str(NOTEBOOKS / f"{name}.py"), *args], env, timeout)


# A float with 12 or more decimals (1.211499373517445, or 1.53e-12, which a table shows as
# 0.00000000000153): what a page must never show a reader.
# (A whole token only: the page's element ids are hex, and "27e-68" inside one is no number.)
LONG_DECIMAL = re.compile(r"\d\.\d{12,}|(?<![\w.\-])\d+(?:\.\d+)?e-(?:1[2-9]|[2-9]\d)(?![\w\-])", re.IGNORECASE)


def export_notebook(
    name: str, out_dir: Path, *args: str, artifacts: Path | None = None, timeout: float = 180
) -> tuple[str, str]:
    """``marimo export html notebooks/NAME.py -- ARGS``: runs every cell as a browser would.
    Returns (stdout + stderr, the page); asserts a clean export and no long decimal on the page."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    if artifacts is not None:
        env["DILASERVE_ARTIFACTS"] = str(artifacts)
    page = out_dir / f"{name}.html"
    # Exported from a copy: the export writes a session snapshot beside the notebook, and the
    # committed snapshots under notebooks/__marimo__/ must not change when the tests run.
    copy = out_dir / f"{name}.py"
    shutil.copyfile(NOTEBOOKS / f"{name}.py", copy)
    # a failing cell makes the export exit 1
    out = _run_clean(
        [sys.executable, "-m", "marimo", "export", "html", str(copy), "-o", str(page), "--", *args], env, timeout
    )
    html = page.read_text()
    long = sorted(set(LONG_DECIMAL.findall(html)))
    assert not long, f"{name}.html shows unrounded numbers: {long[:10]}"
    return out, html


@pytest.fixture(scope="module")
def tiny_artifacts(tmp_path_factory):
    return build_threshold_artifacts(tmp_path_factory.mktemp("artifacts"))


def test_marimo_check_passes():
    files = [str(NOTEBOOKS / f"{n}.py") for n in NAMES]
    proc = subprocess.run(
        [sys.executable, "-m", "marimo", "check", "--strict", *files],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_long_decimals_are_caught():
    assert LONG_DECIMAL.search("mae 1.211499373517445") and not LONG_DECIMAL.search("mae 1.211, 0.0001235")
    assert LONG_DECIMAL.search('"steps on TP-2": 1.53e-12') and not LONG_DECIMAL.search("1e-05, 2.5e+12")
    assert not LONG_DECIMAL.search("random-id='5bab310b-0a9e-a72d-b48e-204ad8b414fc' 9d27e-68f1")


def test_thresholds_on_tiny_artifacts(tiny_artifacts, tmp_path):
    out, html = export_notebook("thresholds", tmp_path, "--prompts=1", artifacts=tiny_artifacts)
    assert "missing artifact" not in out
    assert re.search(r"replay at 0\.9: \d+ steps", out), out[-2000:]
    assert "expected" in html or "correct" in html  # the replay's verdict


def test_thresholds_names_the_command_for_a_missing_artifact(tmp_path):
    out = run_notebook("thresholds", "--prompts=1", artifacts=tmp_path)
    assert "missing artifact" in out and "dagster asset materialize" in out and "+threshold_quality" in out
    assert "replay at" in out  # the replay needs no artifact and still runs


def test_reconfig_solves_both_stages(tmp_path):
    # The default 4 x 4 cluster: its ILP leaves round-off (1e-12 steps) that the page must not show.
    out, _ = export_notebook("reconfig", tmp_path, "--current-tp=2")
    assert re.search(r"stage 1: counts \{1: \d+, 2: \d+, 4: \d+\}", out), out[-2000:]
    assert re.search(r"stage 2: keep \d+, launch \d+, stop \d+", out), out[-2000:]


#: An instance id of a launch in the migration table (the notebook's code has none).
LAUNCH_ID = re.compile(r"tp\d+-n\d+-g\d+-\d+")


def test_reconfig_default_page_adopts_a_plan_it_shows(tmp_path):
    out, html = export_notebook("reconfig", tmp_path)
    verdict = re.search(r"verdict: (adopted|kept); launch (\d+)", out)
    assert verdict, out[-2000:]
    # The defaults make the controller choose: a plan that differs from the running cluster,
    # adopted, with its launches listed, and some class below the top threshold.
    assert verdict.group(1) == "adopted" and int(verdict.group(2)) > 0, out[-2000:]
    assert re.search(r"strong\S{0,40}Adopted:", html) and LAUNCH_ID.search(html)
    means = [float(t) for t in re.findall(r"p\d+/o\d+ (\d\.\d+)", out.split("mean threshold per class")[1])]
    assert len(means) == 4 and min(means) < 0.9, out[-2000:]


def test_reconfig_keeps_a_cluster_that_is_already_the_plan(tmp_path):
    # A small cluster at a trickle, started from the plan itself: the verdict is "kept", and
    # the page lists no launch under it.
    small = ("--nodes=1", "--gpus-per-node=2", "--rate-scale=0.05", "--time-limit-s=2")
    out, _ = export_notebook("reconfig", tmp_path, *small)
    counts = re.search(r"stage 1: counts \{1: (\d+), 2: (\d+)", out)
    assert counts, out[-2000:]
    plan_tp = 1 if int(counts.group(1)) == 2 else 2 if int(counts.group(2)) == 1 else None
    if plan_tp is None:
        pytest.skip(f"the plan mixes degrees ({counts.group(0)}): no uniform cluster is the plan")
    out, html = export_notebook("reconfig", tmp_path, *small, f"--current-tp={plan_tp}")
    verdict = re.search(r"verdict: (adopted|kept); launch (\d+)", out)
    assert verdict and verdict.groups() == ("kept", "0"), out[-2000:]
    assert re.search(r"strong\S{0,40}Kept as is:", html) and not LAUNCH_ID.search(html)


def test_reconfig_infeasible_stage_1_leaves_no_empty_section(tmp_path):
    out, html = export_notebook("reconfig", tmp_path, "--rate-scale=4", "--time-limit-s=1")
    assert "stage 1 infeasible" in out and "verdict:" not in out, out[-2000:]
    assert re.search(r"strong\S{0,40}Stage 1 is infeasible", html)
    # The heading is in the notebook's code, never on the page as an output.
    assert not re.search(r"h3\S{0,60}Migration plan", html)


def test_evaluation_loads_results_and_says_which_run(tmp_path):
    results = build_eval_results(tmp_path / "results")
    out, html = export_notebook("evaluation", tmp_path, f"--results={results}", "--experiment=trace")
    assert "loaded" in out and "'dilaserve'" in out and "'infaas'" in out, out[-2000:]
    assert "full run of" in html and "requests per policy" in html


def test_evaluation_without_results_says_how_to_make_them(tmp_path):
    out = run_notebook("evaluation", f"--results={tmp_path}")
    assert "python -m dilaserve.eval trace --quick" in out


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.timeout(300)
def test_serve_app_starts_answers_and_stops(tmp_path):
    # An empty artifacts folder: the server's documented fallbacks, not whatever data/ holds.
    out = run_notebook(
        "serve_app",
        "--start",
        "--reconfig-interval-s=0",
        f"--artifacts={tmp_path}",
        "--prompt=list : c a f b",
        timeout=280,
    )
    m = re.search(r"server pid (\d+) healthy at (\S+)", out)
    assert m, out[-4000:]
    assert re.search(r"answer: .* steps: [1-9]\d* thresholds: \[[0-9., ]+\].* finish_reason: (stop|length)", out), out[
        -4000:
    ]
    assert "metrics: " in out
    # The app leaves nothing behind: the server exits once the notebook has.
    pid = int(m.group(1))
    deadline = time.monotonic() + 90
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _gone(pid), f"server {pid} still running after the app exited"
