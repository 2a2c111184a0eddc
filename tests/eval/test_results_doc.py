"""docs/results.md is generated from the recorded runs, and every number it shows is one a run printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dilaserve.eval.results_doc import CONTROL_DIR, RESULTS_DIR, RESULTS_DOC, build, control_rows, load, record, render

ROOT = Path(__file__).resolve().parents[2]


def _numbers(obj) -> set[float]:
    """Every number in a JSON document, as the report prints shares: x 100, one decimal."""
    out: set[float] = set()
    if isinstance(obj, dict):
        for v in obj.values():
            out |= _numbers(v)
    elif isinstance(obj, list):
        for v in obj:
            out |= _numbers(v)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        out.add(round(100 * obj, 1))
        out.add(round(obj, 1))
    return out


def test_the_committed_report_is_what_the_recorded_runs_generate():
    docs = load(ROOT / RESULTS_DIR)
    assert docs, "no recorded runs under docs/results/"
    assert (ROOT / RESULTS_DOC).read_text() == render(docs, load(ROOT / CONTROL_DIR)), (
        "run `python -m dilaserve.eval report`"
    )


def test_every_number_in_a_row_is_found_in_the_run_it_names():
    docs = load(ROOT / RESULTS_DIR)
    rows = [line for line in (ROOT / RESULTS_DOC).read_text().splitlines() if line.startswith("| `")]
    assert rows
    for row in rows:
        name = re.match(r"\| `([^`]+)`", row).group(1)
        doc = docs[name]
        known = _numbers(doc["output"])
        out = doc["output"]
        pol = out.get("policies", {})  # a max-rate run has none
        # Margins are differences of two printed shares.
        shares = sorted({round(100 * v["goodput"], 6) for v in pol.values()})
        shares += sorted({round(100 * v["slo_attainment"], 6) for v in pol.values() if "slo_attainment" in v})
        margins = {round(a - b, 1) for a in shares for b in shares}
        if "margin" in out:
            margins.add(round(100 * out["margin"], 1))
        cells = row.split("|")[2:]
        if "rates" in out:  # a max-rate row: its ratio (e.g. 1.25x), then the other policies' rates
            assert cells[-3].strip() == ("–" if out["ratio"] is None else f"{out['ratio']:.2f}x"), row
            for pair in filter(None, cells[-2].strip().strip("–").split("; ")):
                policy, rate = pair.split(": ")
                assert f"{out['rates'][policy]:.1f}" == rate, row
        for cell in cells:
            for num in re.findall(r"[-+]?\d+\.\d+", cell.split("(")[0] if "x" not in cell else ""):
                value = float(num)
                assert value in known or value in margins, f"{name}: {value} is not in {name}.json"


def test_record_keeps_the_command_and_the_printed_line(tmp_path):
    line = json.dumps({"policies": {"dilaserve": {"goodput": 0.5}}})
    path = record("demo", "python -m dilaserve.eval trace --quick", line, tmp_path)
    doc = json.loads(path.read_text())
    assert doc["command"].endswith("trace --quick") and doc["output"]["policies"]["dilaserve"]["goodput"] == 0.5
    with pytest.raises(json.JSONDecodeError):
        record("bad", "cmd", "not json", tmp_path)


def test_a_record_names_the_build_that_made_it_and_the_report_says_so(tmp_path):
    import subprocess

    head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
    made = build()
    assert made is not None and made.split("+")[0] == head  # this checkout's commit, marked where it differs
    line = json.dumps({"policies": {"dilaserve": {"goodput": 0.5}}})
    path = record("demo", "python -m dilaserve.eval trace --quick", line, tmp_path)
    assert json.loads(path.read_text())["build"] == made
    old = {"command": "python -m dilaserve.eval trace", "output": {"policies": {}}}  # recorded before the field
    text = render({"demo": json.loads(path.read_text()), "old": old})
    assert f"`demo`: `python -m dilaserve.eval trace --quick`, build `{made}`" in text
    assert "`old`: `python -m dilaserve.eval trace`, build not recorded" in text


def test_an_ablation_run_gets_one_row_per_policy_against_its_base():
    def summary(g):
        return {"goodput": g, "goodput_low": g, "goodput_high": g}

    pol = {
        "dilaserve-paper": summary(0.5),
        "dilaserve-paper+admission": summary(0.7),
        "dilaserve": summary(0.8),
        "dilaserve-no-tuner": summary(0.75),
    }
    docs = {"abl": {"command": "python -m dilaserve.eval ablation --quick --json", "output": {"policies": pol}}}
    rows = {row.split(" | ")[1]: row for row in render(docs).splitlines() if row.startswith("| `abl`")}
    assert set(rows) == set(pol)
    assert rows["dilaserve-no-tuner"].endswith("| -5.0 |") and rows["dilaserve-paper+admission"].endswith("| +20.0 |")
    assert rows["dilaserve"].endswith("| – |")
    assert "One SLO for all" in render(docs)  # the single-SLO table does not take an ablation for a trace run


def test_a_trace_run_pooled_over_seeds_names_them_in_its_row():
    pol = {f"fixed@{t}{a}": {"goodput": t / 2} for t in (0.8, 0.9) for a in ("", "+admission")}
    pol["dilaserve"] = {"goodput": 0.44}
    command = "python -m dilaserve.eval trace --quick --high-load 1.2 --json"
    one = render({"run": {"command": command, "output": {"policies": pol}}})
    pooled = render({"run": {"command": command + " --seeds 0 1 2", "output": {"policies": pol, "seeds": [0, 1, 2]}}})
    assert "| `run` | 45.0 |" in one and "| `run`, seeds 0, 1, 2 | 45.0 |" in pooled


def test_a_run_on_a_named_cluster_gets_its_phases_per_policy():
    pol = {"dilaserve-no-reconfig": {"goodput": 0.57, "goodput_low": 0.79, "goodput_high": 0.51}}
    command = "python -m dilaserve.eval trace --quick --static-tp 4,4,4,2+1+1 --policies dilaserve-no-reconfig"
    docs = {
        "mixed": {"command": command, "output": {"policies": pol}},
        "other": {"command": "x", "output": {"policies": pol}},
    }
    rows = [row for row in render(docs).splitlines() if row.startswith("| `mixed`")]
    assert rows == ["| `mixed` | `4,4,4,2+1+1` | dilaserve-no-reconfig | 57.0 | 79.0 | 51.0 |"]


def test_a_max_rate_run_gets_a_capacity_row_and_no_other():
    out = {
        "target": 0.9,
        "rates": {"dilaserve": 61.25, "fixed@0.8+admission": 49.0},
        "best_static": {"policy": "fixed@0.8+admission", "rate": 49.0, "goodput": 0.912},
        "dilaserve": {"rate": 61.25, "goodput": 0.904},
        "ratio": 61.25 / 49.0,
    }
    command = "python -m dilaserve.eval max-rate --quick --settings paper --slo-tiers default --json"
    text = render({"cap": {"command": command, "output": out}})
    rows = [row for row in text.splitlines() if row.startswith("| `cap`")]
    assert rows == [
        "| `cap` | `--settings paper`, `--slo-tiers default` | 90% attainment | 61.2 | 90.4 | fixed@0.8+admission | 49.0 "
        "| 91.2 | 1.25x | – |"
    ]
    assert "## Capacity at an SLO" in text and "No complete `frontier --hindsight` run" in text
    # A static policy that holds no rate leaves the ratio open.
    rates = {**out["rates"], "fixed@0.9": 0.0}
    none = {**out, "rates": rates, "best_static": {"policy": "fixed@0.9", "rate": 0.0, "goodput": None}, "ratio": None}
    row = next(r for r in render({"cap": {"command": "x", "output": none}}).splitlines() if r.startswith("| `cap`"))
    assert row.endswith(
        "| one SLO | 90% attainment | 61.2 | 90.4 | fixed@0.9 | 0.0 | – | – | fixed@0.8+admission: 49.0 |"
    )
    # A run on the goodput criterion says so (runs recorded before the flag are on attainment).
    by_goodput = {**out, "criterion": "goodput", "quality_ceiling": 0.95}
    row = next(
        r for r in render({"cap": {"command": "x", "output": by_goodput}}).splitlines() if r.startswith("| `cap`")
    )
    assert "| 90% goodput | 61.2 |" in row
    # A run whose probes pooled seeds names them (one seed, as before the flag, names none).
    pooled = {**by_goodput, "seeds": [0, 1, 2]}
    row = next(r for r in render({"cap": {"command": "x", "output": pooled}}).splitlines() if r.startswith("| `cap`"))
    assert "| 90% goodput, seeds 0, 1, 2 | 61.2 |" in row
    one = {**by_goodput, "seeds": [0]}
    row = next(r for r in render({"cap": {"command": "x", "output": one}}).splitlines() if r.startswith("| `cap`"))
    assert "| 90% goodput | 61.2 |" in row


def test_a_record_names_the_artifacts_it_replayed_and_the_fingerprint_sees_a_rebuild(tmp_path):
    from dilaserve.artifacts import REPLAYED_ARTIFACTS, fingerprint, law_root

    root = tmp_path / "artifacts"
    assert fingerprint(root) is None  # nothing built
    for law, data in [("embedded", b"a"), ("llada-8b-published", b"b")]:
        for rel in REPLAYED_ARTIFACTS:
            path = law_root(law, root) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data + rel.encode())
    first = fingerprint(root)
    (root / "profiles").mkdir()
    (root / "profiles" / "measured.json").write_text("{}")  # a timing of this machine: not replayed
    assert fingerprint(root) == first
    (law_root("llada-8b-published", root) / REPLAYED_ARTIFACTS[0]).write_bytes(b"rebuilt")
    assert fingerprint(root) != first
    path = record("demo", "python -m dilaserve.eval trace", json.dumps({"policies": {}}), tmp_path, artifacts=first)
    doc = json.loads(path.read_text())
    assert doc["artifacts"] == first
    assert f"(artifacts {first})" in render({"demo": doc})


def _dilaserve_run(goodput: float, command: str) -> dict:
    return {"command": command, "output": {"policies": {"dilaserve": {"goodput": goodput}}}}


def test_the_control_table_puts_each_budget_beside_the_free_replays_of_the_recorded_run():
    docs = {"tiers": _dilaserve_run(0.78, "python -m dilaserve.eval trace --quick")}
    base = "python -m dilaserve.eval trace --quick --control-s-per-request 0.001"
    control = {
        "tiers@s1-b0": _dilaserve_run(0.77, base),
        "tiers@s0.05-b5": _dilaserve_run(0.76, f"{base} --control-cpu-share 0.05 --control-burst-s 5"),
        "tiers@s1-b0-cold": _dilaserve_run(0.75, f"{base} --no-tuner-warm-rises"),
    }
    header, rows = control_rows(docs, control)
    assert header[2:] == ["1 of a core, burst 0 s, cold rises", "1 of a core, burst 0 s", "0.05 of a core, burst 5 s"]
    assert rows == [
        "| tiers | 78.0 | 75.0 | 77.0 | 76.0 |",
        "| mean difference | – | -3.00 (lowest -3.0) | -1.00 (lowest -1.0) | -2.00 (lowest -2.0) |",
    ]
    assert "## Control at a server's cost" in render(docs, control)
    assert "## Control at a server's cost" not in render(docs)


def test_every_number_in_the_control_table_is_a_recorded_goodput():
    docs, control = load(ROOT / RESULTS_DIR), load(ROOT / CONTROL_DIR)
    header, rows = control_rows(docs, control)
    for row in rows[:-1]:
        run, free, *cells = (c.strip() for c in row.strip("|").split("|"))
        assert free == f"{100 * docs[run]['output']['policies']['dilaserve']['goodput']:.1f}"
        known = {
            f"{100 * d['output']['policies']['dilaserve']['goodput']:.1f}"
            for k, d in control.items()
            if k.startswith(f"{run}@")
        }
        assert {c for c in cells if c != "–"} <= known, row


def test_an_audit_run_gets_a_row_of_its_summary_and_no_other():
    summary = {
        "tunings": 14,
        "rises": 10,
        "switches": 5,
        "mean_regret": 0.00412,
        "mean_regret_rises": 0.0051,
        "mean_regret_intervals": 0.002,
        "mean_regret_held": 0.0031,
        "chose_oracle_best": 0.5714,
        "switch_overpromise": 0.0123,
    }
    out = {"policy": "dilaserve", "setting": "paper", "seeds": [5, 6], "summary": summary, "tunings": []}
    command = "python -m dilaserve.eval audit --quick --settings paper --phase-s 40 --high-load 1.2 --seeds 5 6"
    text = render({"aud": {"command": command, "output": out}})
    assert "## Auditing the tuner" in text
    assert [row for row in text.splitlines() if row.startswith("| `aud`")] == [
        "| `aud` | dilaserve | `--settings paper`, `--phase-s 40`, one SLO, high load 1.2x, seeds 5, 6 "
        "| 14 (10 rises, 5 switches) | 57.1 | 0.3 | 0.4 | 0.5 | 0.2 | +1.2 |"
    ]
    # An oracle on part of the cluster says so.
    part = {**out, "sample": 0.25}
    assert ", seeds 5, 6, the oracle on 0.25 of the cluster |" in render({"aud": {"command": command, "output": part}})
    # A run that switched nowhere has no over-promise to show.
    none = {**out, "summary": {**summary, "switches": 0, "switch_overpromise": None}}
    assert "| 0.4 | 0.5 | 0.2 | – |" in render({"aud": {"command": command, "output": none}})
