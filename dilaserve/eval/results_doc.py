"""``python -m dilaserve.eval report``: docs/results.md, generated from recorded results.

Each recorded result is a JSON file under ``docs/results/``: the command that ran, the
machine, the build (:func:`build`) and the JSON line the command printed (``{"command",
"machine", "build", "output"}``; :func:`record` writes one). The report turns them into
tables, so every number in docs/results.md is one a run printed;
``tests/eval/test_results_doc.py`` checks that each number it shows is found in the result
file its row names.

Two kinds of result are read:

* a ``trace`` run with the static policies (``fixed@TAU`` and ``fixed@TAU+admission`` at
  every candidate) and ``dilaserve``: the single-SLO table;
* a ``frontier --hindsight`` run: the frontier table (best static point of the whole grid,
  dilaserve, dilaserve without reconfiguration, the margin, and where dilaserve ran);
* an ``ablation`` run: each variant's goodput against the policy it takes one piece from;
* any run started from a named cluster (``--static-tp``): each policy per load phase on it;
* a ``capacity`` run: requests/s per TP degree and threshold, with accuracy;
* a ``max-rate`` run: the highest rate dilaserve holds at the target attainment against the
  best static policy's, with the goodput of each there and the ratio;
* an ``audit`` run: how the tuner's choices fared against the arrivals that came after them.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
from collections import Counter
from pathlib import Path

RESULTS_DIR = Path("docs/results")
RESULTS_DOC = Path("docs/results.md")
#: Runs of dilaserve alone on a recorded run's workload, with replays that take a server's
#: time (``--control-s-per-request``) under a CPU budget: ``WORKLOAD@CONFIG.json``, where
#: WORKLOAD names the recorded run whose workload it ran.
CONTROL_DIR = RESULTS_DIR / "control"


def record(name: str, command: str, output_line: str, folder: Path = RESULTS_DIR, artifacts: str | None = None) -> Path:
    """Store one run's printed JSON line as ``folder/name.json`` with its command and the
    fingerprint of the artifacts it replayed (:func:`dilaserve.artifacts.fingerprint`)."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": command,
        "artifacts": artifacts,
        # Simulated results are deterministic for given artifacts: the machine only dates them.
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "build": build(),
        "output": json.loads(output_line),
    }
    path = folder / f"{name}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def build() -> str | None:
    """The commit the code was checked out at, with ``+changes`` where tracked files of the
    package differ from it; None outside a git checkout. A change to the control plane moves
    the recorded numbers, and a re-record takes hours: the report says which build made each."""
    try:
        git = ("git", "-C", str(Path(__file__).resolve().parents[1]))  # the package
        head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10)
        changed = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", "."],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+changes" if changed.stdout.strip() else "")


def _flag(command: str, flag: str, default: str | None) -> str | None:
    """The value ``command`` gives ``flag``, or ``default`` where it gives none."""
    words = shlex.split(command)
    return words[words.index(flag) + 1] if flag in words[:-1] else default


def _pct(v: float) -> str:
    return f"{100 * v:.1f}"


def best_fixed(policies: dict, suffix: str) -> tuple[str, float]:
    """The best ``fixed@TAU`` (``suffix`` ``""``) or ``fixed@TAU+admission`` by goodput."""
    cands = {
        k: v["goodput"]
        for k, v in policies.items()
        if k.startswith("fixed@") and (k.endswith("+admission") if suffix else "+" not in k) and " " not in k
    }
    name = max(cands, key=cands.get)
    return name, cands[name]


def _tau(name: str) -> str:
    return name.split("@")[1].split("+")[0]


def single_slo_rows(docs: dict[str, dict]) -> list[str]:
    rows = []
    for name, doc in docs.items():
        pol = doc["output"].get("policies", {})  # a max-rate run has none
        if "dilaserve" not in pol or "fixed@0.9" not in pol or "best_static" in doc["output"]:
            continue
        fixed, f_g = best_fixed(pol, "")
        adm, a_g = best_fixed(pol, "+admission")
        d = pol["dilaserve"]["goodput"]
        rows.append(
            f"| `{name}`{_pooled_seeds(doc['output'])} | {_pct(pol['fixed@0.9']['goodput'])} | {_pct(f_g)} ({_tau(fixed)}) | "
            f"{_pct(a_g)} ({_tau(adm)}) | {_pct(d)} | {100 * (d - max(f_g, a_g)):+.1f} |"
        )
    return rows


def frontier_rows(docs: dict[str, dict]) -> list[str]:
    rows = []
    for name, doc in docs.items():
        out = doc["output"]
        if "margin" not in out:  # not a frontier run (a max-rate run also names a best static point)
            continue
        points = Counter(label for _, label in out.get("dilaserve_tunings", []))
        ran = ", ".join(f"{label} x{n}" for label, n in points.most_common(3)) or "adaptive (no tuning)"
        rows.append(
            f"| `{name}` | {out['best_static']['policy']} | {_pct(out['best_static']['goodput'])} | "
            f"{_pct(out['dilaserve']['goodput'])} | {_pct(out['dilaserve-no-reconfig']['goodput'])} | "
            f"{100 * out['margin']:+.1f} | {ran} |"
        )
    return rows


def ablation_rows(docs: dict[str, dict]) -> list[str]:
    """Per ablation run, one row per policy: its goodput and the difference to its base
    (``dilaserve-paper`` for that policy's variants, else ``dilaserve``)."""
    rows = []
    for name, doc in docs.items():
        if " ablation " not in f" {doc['command']} ":
            continue
        pol = doc["output"]["policies"]
        for policy, v in pol.items():
            base = "dilaserve-paper" if policy.startswith("dilaserve-paper") else "dilaserve"
            diff = "–" if policy == base or base not in pol else f"{100 * (v['goodput'] - pol[base]['goodput']):+.1f}"
            cells = [policy, _pct(v["goodput"]), _pct(v["goodput_low"]), _pct(v["goodput_high"]), diff]
            rows.append(f"| `{name}`{_pooled_seeds(doc['output'])} | " + " | ".join(cells) + " |")
    return rows


def load_control_rows(docs: dict[str, dict]) -> list[str]:
    """Per ablation run of the paper's walk with and without its load control, the SLO
    attainment of each (the paper's measure of this ablation) and their difference."""
    rows = []
    for name, doc in docs.items():
        pol = doc["output"].get("policies", {})  # a max-rate run has none
        if " ablation " not in f" {doc['command']} " or "dilaserve-paper-no-load-control" not in pol:
            continue
        high = _flag(doc["command"], "--high-load", None)
        load = f"{high}x" if high is not None else "default"
        setting = _flag(doc["command"], "--settings", "default")
        on, off = pol["dilaserve-paper"], pol["dilaserve-paper-no-load-control"]
        cells = [f"`{setting}`", load, _pct(on["slo_attainment"]), _pct(off["slo_attainment"])]
        cells += [f"{100 * (on['slo_attainment'] - off['slo_attainment']):+.1f}"]
        cells += [_pct(on["slo_attainment_high"]), _pct(off["slo_attainment_high"])]
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return rows


def _static_points(out: dict) -> dict[str, dict]:
    """The grid's static points of a frontier run (every policy but the adaptive ones)."""
    return {k: v for k, v in out["policies"].items() if k.startswith(("fixed@", "tiers("))}


def phase_rows(docs: dict[str, dict]) -> list[str]:
    """Per frontier run, the best static point of each load phase, with its goodput there:
    what switching between static points at the phase boundary could reach at best."""
    rows = []
    for name, doc in docs.items():
        out = doc["output"]
        if "margin" not in out:  # not a frontier run (a max-rate run also names a best static point)
            continue
        static = _static_points(out)
        cells = []
        for phase in ("low", "high"):
            key = f"goodput_{phase}"
            top = max(static, key=lambda k: static[k][key])
            cells.append(f"{_pct(static[top][key])} ({top})")
        mixed = {k: v for k, v in static.items() if " tp=" in k}
        if mixed:
            top = max(mixed, key=lambda k: mixed[k]["goodput_low"])
            cells.append(f"{_pct(mixed[top]['goodput_low'])} ({top})")
        else:
            cells.append("–")
        d = out["dilaserve"]
        cells += [_pct(d["goodput_low"]), _pct(d["goodput_high"])]
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return rows


def _static_tp(command: str) -> str | None:
    return _flag(command, "--static-tp", None)


def layout_rows(docs: dict[str, dict]) -> list[str]:
    """Per run started from a named cluster (``--static-tp``), each policy's goodput overall
    and per load phase on it: what a TP mix kept for the whole run gives in each phase."""
    rows = []
    for name, doc in docs.items():
        layout = _static_tp(doc["command"])
        if layout is None:
            continue
        for policy, v in doc["output"]["policies"].items():
            cells = [f"`{layout}`", policy, _pct(v["goodput"]), _pct(v["goodput_low"]), _pct(v["goodput_high"])]
            rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return rows


#: Flags of a recorded command that say which workload it ran (beside the setting's own).
WORKLOAD_FLAGS = ("--settings", "--workload", "--lengths", "--slo-tiers", "--phase-s", "--dynamics", "--trace")


def _workload(command: str) -> str:
    """The workload flags of ``command`` as written (``one SLO`` where it names no tiers)."""
    words = shlex.split(command)
    flags = [f"{w} {words[i + 1]}" for i, w in enumerate(words[:-1]) if w in WORKLOAD_FLAGS]
    if "--slo-tiers" not in words and "--workload" not in words:  # a named workload brings its tiers
        flags.append("one SLO")
    return ", ".join(f"`{f}`" if f != "one SLO" else f for f in flags)


def _other_rates(out: dict) -> str:
    """Every other policy's rate, highest first (``policy: req/s; ...``): the best static
    point by rate may hold it with wrong answers, which its goodput shows, so the next ones count."""
    others = {p: r for p, r in out["rates"].items() if p not in ("dilaserve", out["best_static"]["policy"])}
    return "; ".join(f"{p}: {r:.1f}" for p, r in sorted(others.items(), key=lambda kv: -kv[1])) or "–"


def max_rate_rows(docs: dict[str, dict]) -> list[str]:
    """Per ``max-rate`` run: the highest rate dilaserve holds at the target attainment and
    its goodput there, against the static policy that holds the highest rate, and the ratio."""
    rows = []
    for name, doc in docs.items():
        out = doc["output"]
        if "rates" not in out or "ratio" not in out:
            continue
        d, s = out["dilaserve"], out["best_static"]
        cells = [
            _workload(doc["command"]),
            f"{100 * out['target']:.0f}% {out.get('criterion', 'attainment')}" + _pooled_seeds(out),
            f"{d['rate']:.1f}",
            "–" if d["goodput"] is None else _pct(d["goodput"]),
            s["policy"],
            f"{s['rate']:.1f}",
            "–" if s.get("goodput") is None else _pct(s["goodput"]),
            "–" if out["ratio"] is None else f"{out['ratio']:.2f}x",
            _other_rates(out),
        ]
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return rows


def _pooled_seeds(out: dict) -> str:
    """``, seeds 0, 1, 2`` where a run pooled several seeds (each probe of a max-rate run,
    each policy of a trace or ablation run)."""
    seeds = out.get("seeds") or []
    return f", seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else ""


def audit_rows(docs: dict[str, dict]) -> list[str]:
    """Per ``audit`` run: its tunings, how often each chose the oracle's best candidate, the
    mean regret (weighted by how long each choice ran, then per tuning over all tunings,
    the rises' and the others'), and how far a switch's replayed lead exceeded its lead on
    the future, in points."""

    def pts(v: float | None) -> str:
        return "–" if v is None else f"{100 * v:.1f}"

    rows = []
    for name, doc in docs.items():
        out = doc["output"]
        if "summary" not in out or "tunings" not in out:
            continue
        s = out["summary"]
        cells = [
            out["policy"],
            _workload(doc["command"])
            + (f", high load {high}x" if (high := _flag(doc["command"], "--high-load", None)) else "")
            + _pooled_seeds(out)
            + (f", the oracle on {out['sample']:g} of the cluster" if out.get("sample", 1.0) < 1 else ""),
            f"{s['tunings']} ({s['rises']} rises, {s['switches']} switches)",
            pts(s["chose_oracle_best"]),
            pts(s.get("mean_regret_held")),
            pts(s["mean_regret"]),
            pts(s["mean_regret_rises"]),
            pts(s["mean_regret_intervals"]),
            "–" if s["switch_overpromise"] is None else f"{100 * s['switch_overpromise']:+.1f}",
        ]
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return rows


def capacity_markdown(run: str, capacity: dict) -> list[str]:
    """A ``capacity`` run's tables, one per setting: per TP degree, the requests/s of a
    static cluster of that degree at each candidate threshold and its share of all-TP-1's at
    the highest threshold; the model's accuracy at each threshold above them."""
    lines = []
    for name, s in capacity.items():
        thresholds = s["thresholds"]
        base = s["rps"]["1"][-1] if "1" in s["rps"] else None
        head = f"| `{run}` | `{name}` ({s['law']} step law, {s['lengths']} lengths) |"
        lines += [
            "| run | setting | what | " + " | ".join(f"τ={t:g}" for t in thresholds) + " |",
            "| --- | --- | --- | " + " | ".join("---" for _ in thresholds) + " |",
            f"{head} accuracy (%) | " + " | ".join(_pct(a) for a in s["accuracy"]) + " |",
        ]
        for tp, row in s["rps"].items():
            lines.append(f"{head} all TP-{tp}, req/s | " + " | ".join(f"{v:.1f}" for v in row) + " |")
            if base:
                lines.append(f"{head} all TP-{tp}, share | " + " | ".join(f"{v / base:.2f}x" for v in row) + " |")
        lines.append("")
    return lines


def capacity_rows(docs: dict[str, dict]) -> list[str]:
    """Every recorded ``capacity`` run's tables (:func:`capacity_markdown`)."""
    return [
        line
        for run, doc in docs.items()
        if "capacity" in doc["output"]
        for line in capacity_markdown(run, doc["output"]["capacity"])
    ]


def load(folder: Path = RESULTS_DIR) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def control_budget(command: str) -> tuple[float, float, bool]:
    """``(cpu share, burst seconds, warm rises)`` a control run's replays ran under."""
    share, burst = float(_flag(command, "--control-cpu-share", "1")), float(_flag(command, "--control-burst-s", "0"))
    return share, burst, "--no-tuner-warm-rises" not in command.split()


def _budget_label(budget: tuple[float, float, bool]) -> str:
    share, burst, warm = budget
    return f"{share:g} of a core, burst {burst:g} s" + ("" if warm else ", cold rises")


def control_rows(docs: dict[str, dict], control: dict[str, dict]) -> tuple[list[str], list[str]]:
    """The header and rows of the control-budget table: per workload (a recorded run's), the
    recorded dilaserve's goodput (free replays) and dilaserve's under each budget with
    replays that take a server's time; the last row is each budget's mean difference from
    the recorded runs over the workloads it ran."""
    budgets = sorted({control_budget(d["command"]) for d in control.values()}, key=lambda b: (-b[0], b[1], b[2]))
    if not budgets:
        return [], []
    by_run: dict[str, dict[tuple[float, float, bool], float]] = {}
    for name, doc in control.items():
        run = name.split("@")[0]
        by_run.setdefault(run, {})[control_budget(doc["command"])] = doc["output"]["policies"]["dilaserve"]["goodput"]
    header = ["workload (recorded run)", "free replays", *(_budget_label(b) for b in budgets)]
    rows, diffs = [], {b: [] for b in budgets}
    for run in sorted(by_run):
        free = docs[run]["output"]["policies"]["dilaserve"]["goodput"]
        cells = [run, _pct(free)]
        for b in budgets:
            g = by_run[run].get(b)
            cells.append("–" if g is None else _pct(g))
            if g is not None:
                diffs[b].append(100 * (g - free))
        rows.append("| " + " | ".join(cells) + " |")
    means = [f"{sum(d) / len(d):+.2f} (lowest {min(d):+.1f})" if d else "–" for d in diffs.values()]
    rows.append("| " + " | ".join(["mean difference", "–", *means]) + " |")
    return header, rows


def render(docs: dict[str, dict], control: dict[str, dict] | None = None) -> str:
    header, budget_rows = control_rows(docs, control or {})
    lines = [
        "# Results",
        "",
        "Generated by `python -m dilaserve.eval report` from the recorded runs in `docs/results/`",
        "(each file holds the command, the machine, the build and the JSON line the run printed). Do not edit",
        "by hand: rerun the command in a file, record it, and regenerate (`python -m dilaserve.eval",
        "rerecord [NAME ...]` does all three and lists what moved). Goodput in % (share of all",
        "requests on time and correct); quick runs, 16 simulated H100s (4 nodes x 4), paper setting",
        "unless the command says otherwise.",
        "",
        "## One SLO for all: dilaserve against the static thresholds",
        "",
        "Best `fixed@τ` is the best fixed threshold without admission, best `fixed@τ+admission` the",
        "best with the same SLO-aware admission; the margin is dilaserve minus the better of the two.",
        "Where a run names seeds, each policy's numbers pool the requests of one run per seed (`--seeds`).",
        "",
        "| run | fixed@0.9 | best fixed@τ | best fixed@τ+admission | dilaserve | margin |",
        "| --- | --- | --- | --- | --- | --- |",
        *single_slo_rows(docs),
        "",
        "## The static frontier in hindsight",
        "",
        "`frontier --hindsight`: the best of the whole static grid (threshold × admission × static",
        "TP mix, and one threshold per tier where the workload has tiers), against dilaserve and",
        "dilaserve without reconfiguration. The last column lists the operating points dilaserve's",
        "tuner ran most often (times chosen).",
        "",
        *(
            [
                "| run | best static point | its goodput | dilaserve | no reconfig | margin | dilaserve ran at |",
                "| --- | --- | --- | --- | --- | --- | --- |",
                *frontier_rows(docs),
            ]
            if frontier_rows(docs)
            else ["No complete `frontier --hindsight` run is recorded yet."]
        ),
        "",
        *(
            [
                "### What switching between static points could gain",
                "",
                "Per load phase of the same runs, the static point with the most goodput in that phase, and the",
                "best point on another TP mix in the low phase. A policy that switched to each phase's best",
                "static point at the boundary, at no cost, could not beat these phase by phase.",
                "",
                "| run | low phase: best static | high phase: best static | low phase: best TP-2/TP-4 mix "
                "| dilaserve, low | dilaserve, high |",
                "| --- | --- | --- | --- | --- | --- |",
                *phase_rows(docs),
                "",
            ]
            if phase_rows(docs)
            else []
        ),
        *(
            [
                "### Static TP mixes named per node",
                "",
                "Runs started from one cluster (`--static-tp`, one entry per node) and kept on it: each",
                "phase's goodput on that mix, beside the same phase on TP-1 in the tables above.",
                "",
                "| run | cluster | policy | goodput | low phase | high phase |",
                "| --- | --- | --- | --- | --- | --- |",
                *layout_rows(docs),
                "",
            ]
            if layout_rows(docs)
            else []
        ),
        *(
            [
                "## Capacity at an SLO",
                "",
                "`max-rate`: the highest rate of the workload's busiest phase (req/s) each policy holds at the",
                "target share of its criterion, judged on that phase's requests, found by a bracketed search;",
                "goodput over the same requests at that rate. The best static point is the static policy of the",
                "run's `--policies` (see its command) that holds the highest rate; the ratio is dilaserve's rate",
                "over its. SLO attainment does not see quality: a low fixed threshold can hold a high rate with",
                "wrong answers, which its goodput shows. The `goodput` criterion holds a rate only where the",
                "answers on time and correct make the target share of what the same requests get right at",
                "threshold 0.9 (`--criterion goodput`). Where the target names seeds, each probe pooled the",
                "busiest phase's requests of one run per seed (`--seeds`). The last column has the rates the other",
                "policies hold.",
                "",
                "| run | workload | target | dilaserve (req/s) | its goodput | best static point | its rate (req/s) "
                "| its goodput | ratio | the other policies (req/s) |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
                *max_rate_rows(docs),
                "",
            ]
            if max_rate_rows(docs)
            else []
        ),
        *(
            [
                "## Auditing the tuner",
                "",
                "`audit`: every tuning's candidates replayed on the arrivals of the tuner's window that came",
                "after it, on the whole cluster unless the row says otherwise (the oracle). Chose best: the share of tunings whose chosen point",
                "made the oracle's most goodput (%); regret: the oracle's best goodput minus the chosen point's,",
                "in points, weighted by how long each choice ran (to the next tuning), then per tuning over all",
                "tunings, the rises' and the others'; over-promise: over the switches, the chosen point's",
                "replayed lead over the point it left minus its lead on the future, in points.",
                "",
                "| run | policy | workload | tunings | chose best | regret, time-weighted | regret per tuning "
                "| at rises | at intervals | over-promise |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
                *audit_rows(docs),
                "",
            ]
            if audit_rows(docs)
            else []
        ),
        *(
            [
                "## Ablation",
                "",
                "Each variant takes one piece from `dilaserve` (or adds or removes one from the paper's walk,",
                "`dilaserve-paper`); the last column is its goodput minus its base's.",
                "",
                "| run | policy | goodput | low phase | high phase | against its base |",
                "| --- | --- | --- | --- | --- | --- |",
                *ablation_rows(docs),
                "",
            ]
            if ablation_rows(docs)
            else []
        ),
        *(
            [
                "### Load control as the paper measured it",
                "",
                "The paper's walk (`dilaserve-paper`) with and without its load control, admission off: SLO",
                "attainment in % overall and in the high phase.",
                "",
                "| run | setting | high load | with | without | difference | high phase, with | high phase, without |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |",
                *load_control_rows(docs),
                "",
            ]
            if load_control_rows(docs)
            else []
        ),
        *(
            [
                "### What a lower threshold and a larger TP degree buy",
                "",
                "`capacity` (no simulation): the requests/s a static cluster of every instance at one TP",
                "degree sustains at each candidate threshold on the trace's lengths, by the capacity model the",
                "experiments place their loads with, and its share of all-TP-1 at the highest threshold. Load",
                "control can only buy what a lower threshold frees; reconfiguration trades TP-1's throughput",
                "for faster steps.",
                "",
                *capacity_rows(docs),
            ]
            if capacity_rows(docs)
            else []
        ),
        *(
            [
                "## Control at a server's cost",
                "",
                "dilaserve alone on each recorded run's workload, with the tuner's replays taking the time a",
                "server's worker takes (`--control-s-per-request 0.001`, about what a replayed request costs this",
                "simulator on one core of the 2-core EPYC) under a CPU budget (`--control-cpu-share`, with",
                "`--control-burst-s` CPU-seconds saved up while idle), and a rise forecast over 15 s, a server's",
                "default, replayed warm (`TunerConfig.warm_rises`; cold rises: before it, as a whole window's",
                "forecast is). Free replays: the recorded run's dilaserve (replays take no simulated time). Goodput",
                "in %; the last row is each budget's mean difference from the free replays, and its lowest.",
                "The commands are in `docs/results/control/`.",
                "",
                "| " + " | ".join(header) + " |",
                "| " + " | ".join("---" for _ in header) + " |",
                *budget_rows,
                "",
            ]
            if budget_rows
            else []
        ),
        "## Commands",
        "",
        *[
            f"- `{name}`: `{doc['command']}`"
            + (f" (artifacts {doc['artifacts']})" if doc.get("artifacts") else "")
            + (f", build `{doc['build']}`" if doc.get("build") else ", build not recorded")
            for name, doc in docs.items()
        ],
        "",
    ]
    return "\n".join(lines)


def write_report(folder: Path = RESULTS_DIR, out: Path = RESULTS_DOC) -> Path:
    out.write_text(render(load(folder), load(folder / CONTROL_DIR.name)))
    return out
