"""Flags generated from the per-concern configs: every setting reachable, validated by its owner."""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dilaserve.control.config import ControlConfig
from dilaserve.control.step_law import StepLaw
from dilaserve.predict.base import OneShotPredictor
from dilaserve.reconfig.config import MonitorConfig, ReconfigConfig
from dilaserve.schedule.config import SchedulerConfig
from dilaserve.schedule.tuner import TunerConfig
from dilaserve.serve.config import (
    SERVE_MAX_STEP_MS,
    SERVE_STEP_TIME_ESTIMATOR,
    SERVE_STEP_TIME_HOLD_S,
    SERVE_STEP_TIME_QUANTILE,
    ServeConfig,
)
from dilaserve.serve.control_inputs import ControlInputs
from dilaserve.serve.control_setup import control_plane_spec
from dilaserve.utils.cli import add_dataclass_arguments, build_dataclass, field_docs, parse_dataclass, plain, values_for
from tests.control.builders import default_profile

ROOT = Path(__file__).resolve().parents[2]


def serve(*argv: str) -> ServeConfig:
    return parse_dataclass(ServeConfig, list(argv))


def test_settings_the_concerns_own_are_flags_of_the_server():
    cfg = serve(
        "--refresh-every-steps",
        "2",
        "--load-control-interval-s",
        "0.5",
        "--reconfig-min-improvement",
        "0.2",
        "--monitor-window-s",
        "30",
        "--monitor-input-edges",
        "64",
        "512",
        "--warn-interval-s",
        "1",
        "--thresholds",
        "0.9",
        "0.7",
        "--quality-budget",
        "none",
    )
    # The server's own defaults for a live machine (a step-time cap, the queue recheck) stand
    # beside the flags given.
    assert cfg.control == ControlConfig(
        thresholds=(0.7, 0.9),
        refresh_every_steps=2,
        load_control_interval_s=0.5,
        quality_budget=None,
        step_time_quantile=SERVE_STEP_TIME_QUANTILE,
        step_time_estimator=SERVE_STEP_TIME_ESTIMATOR,
        step_time_hold_s=SERVE_STEP_TIME_HOLD_S,
        max_step_ms=SERVE_MAX_STEP_MS,
        recheck_queue=True,
    )
    assert cfg.reconfig.min_improvement == 0.2 and cfg.reconfig.interval_s == 60.0
    assert cfg.monitor == MonitorConfig(input_edges=(64, 512), window_s=30.0)
    assert cfg.scheduler == SchedulerConfig(warn_interval_s=1.0)


def test_every_field_of_every_concern_is_a_documented_flag_unless_filled_at_run_time():
    parser = argparse.ArgumentParser()
    add_dataclass_arguments(parser, ServeConfig)
    flags = {a.dest: a for a in parser._actions if a.dest != "help"}
    run_time = {
        ("control", "step_law"),
        ("control", "operating_point"),  # pinned by the tuner or the static frontier
        ("reconfig", "tokens_per_step"),
        ("reconfig", "block_length"),
    }
    for name, cls, prefix in (
        ("control", ControlConfig, ""),
        ("reconfig", ReconfigConfig, "reconfig_"),
        ("monitor", MonitorConfig, "monitor_"),
        ("scheduler", SchedulerConfig, ""),
        ("tuner", TunerConfig, "tuner_"),
    ):
        for f in dataclasses.fields(cls):
            if (name, f.name) not in run_time:
                assert prefix + f.name in flags, f"{cls.__name__}.{f.name} has no flag"
    assert all(a.help and not a.help.startswith(" (default") for a in flags.values())


def test_reconfiguration_interval_zero_switches_it_off():
    assert serve("--reconfig-interval-s", "0").reconfig is None
    assert build_dataclass(ServeConfig, {"reconfig_interval_s": 0}).reconfig is None


def test_errors_name_the_flag_and_come_from_the_owning_config(capsys):
    with pytest.raises(SystemExit):
        serve("--refresh-every-steps", "0")
    err = capsys.readouterr().err
    assert "--refresh-every-steps=0" in err and "ControlConfig" not in err
    with pytest.raises(SystemExit):
        serve("--fixed-threshold", "0.95")
    assert "--fixed-threshold 0.95 is not a candidate" in capsys.readouterr().err


def test_bool_fields_are_flag_pairs_and_hand_declared_flags_win():
    @dataclasses.dataclass
    class Opts:
        """Attributes:
        quick: a short run.
        """

        quick: bool = False

    assert parse_dataclass(Opts, ["--quick"]).quick is True
    assert parse_dataclass(Opts, ["--quick", "--no-quick"]).quick is False
    assert parse_dataclass(Opts, []).quick is False
    assert field_docs(Opts) == {"quick": "a short run."}
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_const", const=True, default=False, help="by hand")
    parser.add_argument("--json", action="store_true")
    add_dataclass_arguments(parser, Opts)
    assert parser.parse_args(["--quick"]).quick is True
    assert values_for(Opts, parser.parse_args(["--json"])) == {"quick": False}


def test_overrides_only_leaves_out_the_flags_not_given():
    parser = argparse.ArgumentParser()
    add_dataclass_arguments(parser, MonitorConfig, overrides_only=True)
    assert vars(parser.parse_args(["--window-s", "30"])) == {"window_s": 30.0}


def test_unknown_settings_are_refused():
    with pytest.raises(TypeError, match="no setting refresh"):
        build_dataclass(ServeConfig, {"refresh": 2})


def test_the_served_control_plane_is_the_flags_completed_by_the_artifacts():
    cfg = serve(
        "--refresh-every-steps", "3", "--monitor-window-s", "30", "--block-length", "16", "--max-request-tokens", "900"
    )
    law = StepLaw.from_tokens_per_step({0.5: 4.0, 0.9: 2.0}, 16)
    inputs = ControlInputs(
        default_profile(), OneShotPredictor({0.5: 0.3, 0.9: 0.6}), OneShotPredictor({0.9: 0.6}), law, []
    )
    spec = control_plane_spec(cfg, inputs)
    assert spec.control == dataclasses.replace(cfg.control, step_law=law)
    assert spec.monitor is cfg.monitor and spec.scheduler.max_request_tokens == 900
    assert spec.reconfig.block_length == 16 and spec.reconfig.tokens_per_step == law.tokens_per_step_at(law.thresholds)
    assert control_plane_spec(serve("--reconfig-interval-s", "0"), inputs).reconfig is None


def test_eval_and_bench_options_come_from_their_dataclasses(capsys):
    from dilaserve.bench.quality import QUICK
    from dilaserve.bench.quality import parse as parse_quality
    from dilaserve.eval.__main__ import parse as parse_eval

    names, opts, as_json, record_as = parse_eval(
        ["trace", "--quick", "--json", "--policies", "infaas", "dilaserve", "--lengths", "sharegpt", "--phase-s", "30"]
    )
    assert names == ["trace"] and as_json and record_as is None and opts.quick and opts.settings == ("paper",)
    assert opts.policies == ("infaas", "dilaserve") and opts.lengths == "sharegpt" and opts.phase_s == 30.0
    assert parse_eval(["trace"])[1].settings == ("paper", "embedded")
    # Given flags override the quick run's settings; the others keep the quick run's.
    cfg, as_json = parse_quality(["--quick", "--loads", "0.5", "2", "--gpus", "1"])
    assert cfg.loads == (0.5, 2.0) and cfg.gpus == 1 and cfg.requests == QUICK.requests and not as_json
    with pytest.raises(SystemExit):
        parse_quality(["--requests", "1"])
    assert "use at least 2" in capsys.readouterr().err


def test_help_prints_each_default_once_in_plain_text(capsys):
    with pytest.raises(SystemExit):
        serve("--help")
    out = capsys.readouterr().out
    entries = re.split(r"\n  --", out)
    assert len(entries) > 40  # every flag's entry, not an empty page
    for entry in entries:
        assert entry.count("(default") <= 1, entry
    for markup in (":meth:", ":class:", ":func:", ":attr:", "``", "`"):
        assert markup not in out, markup
    assert "(default: None)" not in out  # a None default reads as the flag's own value, none


def test_plain_text_keeps_what_sphinx_would_print():
    assert plain("see :meth:`~dilaserve.reconfig.config.ReconfigConfig.with_step_law`") == "see with_step_law"
    assert (
        plain(":class:`dilaserve.sim.backend.SimBackend` and ``k + 1``") == "dilaserve.sim.backend.SimBackend and k + 1"
    )


def test_the_server_parses_its_flags_without_importing_torch():
    # --help and flag errors come back at once: the engine, Ray and the web stack load only to serve
    code = (
        "import sys\n"
        "from dilaserve.serve.__main__ import main\n"
        "from dilaserve.serve.config import SERVE_MAX_STEP_MS, SERVE_STEP_TIME_QUANTILE, ServeConfig\n"
        "from dilaserve.utils.cli import parse_dataclass\n"
        "parse_dataclass(ServeConfig, ['--port', '8001'])\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'ray', 'fastapi', 'uvicorn', 'polars') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
