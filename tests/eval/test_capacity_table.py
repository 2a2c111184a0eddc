"""``eval capacity``: what each threshold and TP degree buys, from the experiments' own capacity model."""

from __future__ import annotations

import json
import re
from dataclasses import replace

from dilaserve.eval.__main__ import main
from dilaserve.eval.capacity_table import capacity_table
from dilaserve.eval.context import EvalOptions
from dilaserve.eval.results_doc import capacity_rows, render
from dilaserve.sim.capacity import nominal_capacity_rps
from tests.eval.builders import TinyContext
from tests.eval.test_eval import _artifacts


def test_each_cell_is_the_capacity_model_at_that_threshold_and_degree():
    ctx = TinyContext(EvalOptions(settings=("paper",)))
    doc, text = capacity_table(ctx)
    setting = ctx.settings[0]
    row = doc["capacity"][setting.name]
    tr = ctx.trace_for(setting)
    assert row["thresholds"] == list(setting.control.thresholds)
    assert set(row["rps"]) == {str(tp) for tp in setting.cluster.tp_degrees}
    for tp, caps in row["rps"].items():
        for t, cap in zip(row["thresholds"], caps):
            want = nominal_capacity_rps(
                replace(setting, initial_tp=int(tp)), ctx.table, tr.prompt_tokens, tr.output_tokens, t
            )
            assert cap == round(want, 2)
        # A lower threshold commits more per step: never fewer requests/s.
        assert caps == sorted(caps, reverse=True) and caps[0] > caps[-1]
    assert row["accuracy"] == [round(ctx.quality.accuracy(t), 4) for t in row["thresholds"]]
    assert "all TP-1, req/s" in text


def test_a_recorded_capacity_run_renders_its_numbers(tmp_path, capsys):
    _artifacts(tmp_path)
    assert main(["capacity", "--settings", "paper", "--artifacts", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    docs = {"capacity-paper": {"command": "python -m dilaserve.eval capacity", "output": out}}
    rows = capacity_rows(docs)
    caps = out["capacity"]["paper"]["rps"]
    req_rows = [r for r in rows if ", req/s |" in r]
    assert len(req_rows) == len(caps)
    for r, (tp, row) in zip(req_rows, caps.items()):
        assert f"all TP-{tp}, req/s" in r
        assert [float(v) for v in re.findall(r"\| (\d+\.\d) ", r + " ")] == [round(v, 1) for v in row]
    assert "What a lower threshold and a larger TP degree buy" in render(docs)
