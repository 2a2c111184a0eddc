"""``python -m dilaserve.eval rerecord [NAME ...]``: run the recorded results again.

Every file under ``docs/results/`` holds the command that made it (:func:`record`), so
re-recording is running those commands again, one after the other (each runs its own
processes, ``--jobs``), and writing docs/results.md from what they recorded. A change to the
control plane moves the recorded numbers; this says by how much. It ends with one JSON line:

``{"rerecorded": [NAME, ...], "failed": {NAME: exit code}, "changes": {NAME: {KEY: [before,
after]}}, "fell": [NAME.KEY, ...], "fell_on_other_artifacts": [NAME.KEY, ...], "wall_s":
seconds}``

where the keys are each result's headline numbers (:func:`headline`): dilaserve's margin
over the best static point (``margin``, and ``margin_without_admission`` against the best
fixed threshold without admission), its gain from reconfiguration (``reconfig_gain``),
a max-rate ``ratio``, each policy's ``goodput:NAME``, and each headline run's wall seconds
(``wall_s:NAME``), and where ``dilaserve-no-tuner`` ran beside it, dilaserve's wall time over
its (``tuner_wall_ratio``). ``fell`` lists the margins and gains that fell by more than
``--tolerance`` (0.005: half a point of goodput).

Results are compared only on one artifact fingerprint (docs/architecture.md, "What a recorded
result depends on"): a record re-run on other artifacts (another machine's build, say) shows
``"artifacts": [before, after]`` among its changes, and a margin of it that fell is listed in
``fell_on_other_artifacts``, not in ``fell``: the change of inputs alone moves an adaptive
policy's goodput by tenths of a point, so that fall does not judge the code.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dilaserve.eval.results_doc import RESULTS_DIR, best_fixed, load, write_report

#: Headline numbers whose fall counts against a change (a goodput difference, not a level).
GAINS = ("margin", "margin_without_admission", "reconfig_gain")


def headline(output: dict) -> dict[str, float]:
    """The numbers of one recorded output that a change is judged by (see the module)."""
    out: dict[str, float] = {}
    policies = output.get("policies", {})
    if "margin" in output:
        out["margin"] = output["margin"]
    if "ratio" in output:
        out["ratio"] = output["ratio"]
    dil, alone = output.get("dilaserve", policies.get("dilaserve")), output.get("dilaserve-no-reconfig")
    if isinstance(dil, dict) and isinstance(alone, dict) and "goodput" in alone:
        out["reconfig_gain"] = dil["goodput"] - alone["goodput"]
    if "margin" not in output and "dilaserve" in policies:
        for key, suffix in (("margin", "+admission"), ("margin_without_admission", "")):
            try:
                out[key] = policies["dilaserve"]["goodput"] - best_fixed(policies, suffix)[1]
            except ValueError:  # the run has no fixed threshold of that kind
                continue
    for name, row in policies.items():
        if isinstance(row, dict) and "goodput" in row and not name.startswith(("fixed@", "tiers(", "static@")):
            out[f"goodput:{name}"] = row["goodput"]
    walls = output.get("policy_wall_s", {})
    for name, wall in walls.items():
        out[f"wall_s:{name}"] = wall
    if walls.get("dilaserve") and walls.get("dilaserve-no-tuner"):
        out["tuner_wall_ratio"] = walls["dilaserve"] / walls["dilaserve-no-tuner"]
    return out


@dataclass
class Comparison:
    """What moved between two sets of recorded docs (see the module)."""

    #: every headline number that moved, ``{NAME: {KEY: [before, after]}}``, and
    #: ``"artifacts": [before, after]`` where the fingerprints differ
    changes: dict[str, dict[str, list]] = field(default_factory=dict)
    #: margins and gains that fell by more than the tolerance, on the same artifacts
    fell: list[str] = field(default_factory=list)
    #: the same, where the record was re-run on other artifacts (not a verdict on the code)
    fell_on_other_artifacts: list[str] = field(default_factory=list)


def compare(before: dict[str, dict], after: dict[str, dict], tolerance: float = 0.005) -> Comparison:
    """The :class:`Comparison` of two sets of recorded docs (:func:`load`)."""
    out = Comparison()
    for name in sorted(after):
        old = headline(before[name]["output"]) if name in before else {}
        new = headline(after[name]["output"])
        moved: dict[str, list] = {k: [old.get(k), new.get(k)] for k in sorted({*old, *new}) if old.get(k) != new.get(k)}
        inputs = [before.get(name, {}).get("artifacts"), after[name].get("artifacts")]
        same_inputs = name not in before or inputs[0] == inputs[1]
        if not same_inputs:
            moved["artifacts"] = inputs
        if moved:
            out.changes[name] = moved
        (out.fell if same_inputs else out.fell_on_other_artifacts).extend(
            f"{name}.{k}"
            for k in GAINS
            if old.get(k) is not None and new.get(k) is not None and new[k] < old[k] - tolerance
        )
    return out


def rerun(command: str, cwd: Path) -> int:
    """Run one recorded command (``python -m dilaserve.eval ...``) with this interpreter;
    its exit code (2 where the command is not one of ours)."""
    words = shlex.split(command)
    if words[:3] != ["python", "-m", "dilaserve.eval"]:
        print(f"recorded command {command!r} is not `python -m dilaserve.eval ...`: re-run it by hand", file=sys.stderr)
        return 2
    return subprocess.run([sys.executable, "-m", "dilaserve.eval", *words[3:]], cwd=cwd).returncode


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dilaserve.eval rerecord",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("names", nargs="*", help="the results to run again (docs/results/NAME.json); default: all")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--tolerance", type=float, default=0.005, help="a margin that falls by more is listed in `fell`")
    a = ap.parse_args(argv)
    folder, root = RESULTS_DIR, Path.cwd()
    before = load(folder) if folder.is_dir() else {}
    unknown = [n for n in a.names if n not in before]
    if unknown:
        ap.error(f"no recorded result named {', '.join(unknown)} in {folder}/: use one of {', '.join(sorted(before))}")
    names = a.names or sorted(before)
    if a.dry_run:
        for name in names:
            print(before[name]["command"])
        return 0
    t0, failed = time.perf_counter(), {}
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name}: {before[name]['command']}", file=sys.stderr, flush=True)
        code = rerun(before[name]["command"], root)
        if code:
            failed[name] = code
            print(f"[{i}/{len(names)}] {name} failed (exit {code}); its recorded result is kept", file=sys.stderr)
    after = load(folder)
    print(f"wrote {write_report(folder)} from {folder}/*.json", file=sys.stderr)
    diff = compare(before, {n: after[n] for n in names if n not in failed}, a.tolerance)
    elsewhere = sorted(n for n, moved in diff.changes.items() if "artifacts" in moved)
    if elsewhere:
        print(
            f"re-run on other artifacts than recorded (their falls are not judged): {', '.join(elsewhere)}",
            file=sys.stderr,
        )
    rerecorded = [n for n in names if n not in failed]
    wall = round(time.perf_counter() - t0, 1)
    print(json.dumps({"rerecorded": rerecorded, "failed": failed, **asdict(diff), "wall_s": wall}))
    return 1 if failed else 0
