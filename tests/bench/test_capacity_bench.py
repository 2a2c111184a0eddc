"""The capacity bench: the capacity model's prediction against the simulator's saturation."""

import json

import pytest

from dilaserve.bench.capacity import QUICK, main, run


def test_predicted_capacity_matches_the_simulated_saturation():
    out = run(QUICK, ("gsm8k", "long-prompt"))
    assert set(out["workloads"]) == {"gsm8k", "long-prompt"}
    for w in out["workloads"].values():
        assert w["predicted_rps"] > 0 and w["measured_rps"] > 0
        assert w["ratio"] == round(w["measured_rps"] / w["predicted_rps"], 3)
    assert out["max_abs_error"] == pytest.approx(max(abs(w["ratio"] - 1) for w in out["workloads"].values()))
    assert out["max_abs_error"] <= out["target_max_abs_error"] == 0.15
    assert out["settings"]["policy"] == "infaas" and out["settings"]["threshold"] == 0.9
    assert "machine" in out


def test_cli_prints_one_json_line_last(capsys):
    assert main(["--quick", "--json", "--shapes", "long-prompt"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert set(json.loads(last)["workloads"]) == {"long-prompt"}
