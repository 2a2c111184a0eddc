from pathlib import Path

import dagster as dg
import pytest
import yaml

from pipelines.__main__ import command
from pipelines.definitions import defs

ASSETS = {
    "prompt_set",
    "model_checkpoint",
    "rollouts",
    "step_features",
    "step_predictor",
    "measured_profile",
    "analytic_profiles",
    "threshold_quality",
    "step_dynamics",
    "published_step_dynamics",
    "published_rollouts",
    "published_step_features",
    "published_step_predictor",
    "published_threshold_quality",
}


def test_definitions_load_with_the_whole_graph():
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == ASSETS
    assert {c.name for c in graph.asset_check_keys} == {
        "step_features_schema",
        "predictor_beats_oneshot",
        "analytic_profiles_calibrated",
        "published_tokens_per_step_match",
        "published_predictor_beats_oneshot",
    }
    upstream = {k.to_user_string() for k in graph.get(dg.AssetKey("step_predictor")).parent_keys}
    assert upstream == {"step_features"}
    # The published law's predictor is trained on rollouts of that law, not on the model's.
    upstream = {k.to_user_string() for k in graph.get(dg.AssetKey("published_step_predictor")).parent_keys}
    assert upstream == {"published_step_features"}


def test_workspace_points_at_the_definitions():
    ws = yaml.safe_load((Path(__file__).resolve().parents[2] / "workspace.yaml").read_text())
    assert ws["load_from"][0]["python_module"]["module_name"] == "pipelines.definitions"


def test_cli_wrapper_selects_upstream_of_named_assets():
    assert command(["materialize"])[-1] == "*"
    assert command(["materialize", "step_predictor", "step_dynamics"])[-1] == "*step_predictor,*step_dynamics"
    with pytest.raises(SystemExit):
        command(["deploy"])


@pytest.mark.parametrize("argv", [["materialize", "--help"], ["--help"], ["materialize", "-h", "rollouts"]])
def test_cli_wrapper_answers_help_with_its_usage(argv):
    with pytest.raises(SystemExit, match="materialize"):
        command(argv)


def test_cli_wrapper_names_the_assets_for_an_unknown_one():
    with pytest.raises(SystemExit, match="no asset named 'step_predicter'.*step_predictor"):
        command(["materialize", "step_predicter"])


def test_dev_silences_only_dagsters_dg_dev_notice():
    import warnings

    from dagster_shared.utils.warnings import supersession_warning

    from pipelines.__main__ import interpreter_flags

    assert interpreter_flags(["materialize"]) == []
    flag, spec = interpreter_flags(["dev"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings._setoption(spec)  # what `python -W spec` does
        supersession_warning("Function `dev_command`", "Use 'dg dev' instead.")
        supersession_warning("Function `other_command`")
    assert flag == "-W" and [str(w.message).split(" is ")[0] for w in caught] == ["Function `other_command`"]


def test_a_law_with_its_own_checkpoint_is_a_configured_run_of_the_same_assets(monkeypatch):
    import json

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    from dilaserve.artifacts import BLOCK_LAW, LAW_CHECKPOINTS, law_root
    from pipelines.__main__ import LAW_ASSETS, dagster_home

    args = command(["materialize", "--law", BLOCK_LAW])
    assert args[args.index("--select") + 1] == ",".join(f"*{a}" for a in LAW_ASSETS)
    cfg = json.loads(args[args.index("--config-json") + 1])["resources"]
    assert cfg["model"]["config"]["checkpoint"].endswith(LAW_CHECKPOINTS[BLOCK_LAW])
    assert cfg["artifacts"]["config"]["root"].endswith(str(law_root(BLOCK_LAW).relative_to(law_root("embedded"))))
    # named assets narrow it; its own Dagster home keeps the two models' stored outputs apart
    assert command(["materialize", "--law", BLOCK_LAW, "rollouts"])[5] == "*rollouts"
    assert dagster_home(["materialize", "--law", BLOCK_LAW]).name == BLOCK_LAW
    with pytest.raises(SystemExit, match="no checkpoint of its own"):
        command(["materialize", "--law", "llada-8b-published"])


def test_a_new_dagster_home_has_no_telemetry_and_no_community_pop_up(tmp_path):
    import dagster as dg

    from pipelines.__main__ import write_instance_settings

    write_instance_settings(tmp_path)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert not instance.nux_enabled and not instance.telemetry_enabled
    # A dagster.yaml someone wrote is left as it is.
    (tmp_path / "dagster.yaml").write_text("telemetry:\n  enabled: true\n")
    write_instance_settings(tmp_path)
    assert (tmp_path / "dagster.yaml").read_text() == "telemetry:\n  enabled: true\n"
