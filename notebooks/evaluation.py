import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="DiLaServe: evaluation report")


@app.cell
def _():
    import math
    from pathlib import Path

    import marimo as mo
    import matplotlib.pyplot as plt
    import polars as pl
    from matplotlib.ticker import FuncFormatter, NullFormatter

    from dilaserve.artifacts import MissingArtifactError
    from dilaserve.eval.context import SETTINGS, EvalContext, EvalOptions
    from dilaserve.eval.experiments import EXPERIMENTS
    from dilaserve.eval.report import write
    from dilaserve.eval.saved_runs import find_runs, preferred
    from dilaserve.sim.traces import TraceFormatError
    from dilaserve.utils.display import rounded_frame

    return (
        EXPERIMENTS,
        EvalContext,
        EvalOptions,
        FuncFormatter,
        MissingArtifactError,
        NullFormatter,
        Path,
        SETTINGS,
        TraceFormatError,
        find_runs,
        math,
        mo,
        pl,
        plt,
        preferred,
        rounded_frame,
        write,
    )


@app.cell
def _(mo):
    mo.md("""
    # Evaluation report

    Results of `python -m dilaserve.eval EXPERIMENT` (simulated clusters, every policy on
    the same workload): SLO attainment, latency, quality and goodput (the share of requests
    answered in time and correctly) per policy. Pick a run an earlier `python -m dilaserve.eval`
    wrote under `results/` (a full run, the one the README reports, is shown first), or run a
    quick experiment from here (a few minutes; it needs the pipeline's artifacts; it goes to
    `results/quick/` and leaves full runs alone).

    Open with `marimo edit notebooks/evaluation.py`; headless:
    `python notebooks/evaluation.py --results=DIR --experiment=trace`
    (add `--run` to run the quick experiment first).
    """)
    return


@app.cell
def _(EXPERIMENTS, Path, mo):
    # --results=DIR (default results/), --experiment=NAME, --run (run it, quick, on load)
    args = mo.cli_args()
    results_dir = Path(str(args.get("results", "results")))
    quick_dir = results_dir / "quick"  # runs started here: never over a full run's folder
    default_experiment = str(args.get("experiment", "trace"))
    run_on_load = "run" in args
    mo.stop(
        run_on_load and default_experiment not in EXPERIMENTS,
        mo.callout(
            mo.md(f"Unknown experiment `{default_experiment}`: choose one of {sorted(EXPERIMENTS)}."), kind="danger"
        ),
    )
    return default_experiment, quick_dir, results_dir, run_on_load


@app.cell
def _(EXPERIMENTS, SETTINGS, default_experiment, mo):
    experiment = mo.ui.dropdown(
        list(EXPERIMENTS),
        value=default_experiment if default_experiment in EXPERIMENTS else next(iter(EXPERIMENTS)),
        label="experiment to run",
    )
    settings = mo.ui.multiselect(sorted(SETTINGS), value=["paper"], label="cluster settings")
    run = mo.ui.run_button(label="run it (quick)")
    mo.hstack([experiment, settings, run], justify="start")
    return experiment, run, settings


@app.cell
def _(
    EXPERIMENTS,
    EvalContext,
    EvalOptions,
    MissingArtifactError,
    TraceFormatError,
    experiment,
    mo,
    quick_dir,
    run,
    run_on_load,
    settings,
    write,
):
    # Runs only on a click (or --run): a quick experiment still takes minutes.
    run_message = None
    if run.value or run_on_load:
        _ctx = EvalContext(EvalOptions(quick=True, settings=tuple(settings.value) or ("paper",), out=quick_dir))
        try:
            with mo.status.spinner(title=f"Running {experiment.value} (quick) on the simulator"):
                write(EXPERIMENTS[experiment.value](_ctx), _ctx)
            run_message = mo.callout(mo.md(f"Ran `{experiment.value}` (quick) into `{quick_dir}`."), kind="success")
        except (MissingArtifactError, TraceFormatError) as e:
            print(f"error: {e}")
            run_message = mo.callout(mo.md(f"**The run needs pipeline artifacts.**\n\n```\n{e}\n```"), kind="danger")
    run_message
    return (run_message,)


@app.cell
def _(default_experiment, find_runs, mo, preferred, quick_dir, results_dir, run_message):
    run_message  # look again after a run
    saved = find_runs(results_dir)
    _first = preferred(saved, default_experiment)
    if _first is None:
        print(
            f"no results in {results_dir}: run `python -m dilaserve.eval {default_experiment} --quick "
            f"--out {quick_dir}`"
        )
    mo.stop(
        _first is None,
        mo.callout(
            mo.md(
                f"No results under `{results_dir}`. Click **run it (quick)** (minutes), or run\n\n"
                f"```\npython -m dilaserve.eval {default_experiment} --quick --out {quick_dir}\n```\n\n"
                f"The full run the README reports (minutes per policy) is\n\n"
                f"```\npython -m dilaserve.eval {default_experiment} --settings paper --out {results_dir}\n```"
            ),
            kind="warn",
        ),
    )
    chosen_run = mo.ui.dropdown(
        {r.label: i for i, r in enumerate(saved)}, value=_first.label, label="results", full_width=True
    )
    chosen_run
    return chosen_run, saved


@app.cell
def _(chosen_run, mo, pl, saved):
    shown_run = saved[chosen_run.value]
    folder = shown_run.folder
    summary = pl.read_parquet(folder / "summary.parquet")
    requests = pl.read_parquet(folder / "requests.parquet") if (folder / "requests.parquet").exists() else None
    print(f"loaded {folder}: {summary.height} runs, policies {list(shown_run.policies)}")
    _kind = {
        "full": "a **full** run (what the README reports)",
        "quick": "a **quick** run (short phases: numbers differ from the README's full run)",
    }.get(shown_run.kind, "a run whose summary does not say quick or full")
    mo.callout(
        mo.md(
            "\n".join(
                [
                    f"Showing `{folder}`: `{shown_run.experiment}`, {_kind}, written {shown_run.written:%Y-%m-%d %H:%M} UTC; "
                    f"settings {', '.join(f'`{x}`' for x in shown_run.settings)}; {shown_run.requests:,} requests per policy.",
                    "",
                    *[f"- {n}" for n in shown_run.notes],
                ]
            )
        ),
        kind="info" if shown_run.kind == "full" else "neutral",
    )
    return folder, requests, summary


@app.cell
def _(mo, summary):
    _policies = summary["policy"].unique(maintain_order=True).to_list()
    policy_filter = mo.ui.multiselect(_policies, value=_policies, label="policies")
    _metrics = {
        "SLO attainment": "slo_attainment",
        "attainment, low load": "slo_attainment_low",
        "attainment, high load": "slo_attainment_high",
        "mean latency (s)": "mean_latency_s",
        "p99 latency (s)": "p99_latency_s",
        "quality": "quality",
        "mean threshold": "mean_threshold",
        "goodput (in time and correct)": "goodput",
        "goodput, high load": "goodput_high",
    }
    # Only the columns this run has (an experiment added later may write fewer or more).
    _metrics = {k: v for k, v in _metrics.items() if v in summary.columns}
    metric = mo.ui.dropdown(_metrics, value=next(iter(_metrics)), label="metric")
    mo.hstack([policy_filter, metric], justify="start")
    return metric, policy_filter


@app.cell
def _(math, metric, mo, pl, plt, policy_filter, summary):
    shown = summary.filter(pl.col("policy").is_in(policy_filter.value))
    mo.stop(shown.is_empty(), mo.md("_Pick at least one policy._"))
    _col = metric.value
    _settings = shown["setting"].unique(maintain_order=True).to_list()
    _fig, _axes = plt.subplots(1, len(_settings), figsize=(5.5 * len(_settings), 3.6), squeeze=False)
    for _ax, _setting in zip(_axes[0], _settings):
        _sub = shown.filter(pl.col("setting") == _setting)
        if "x" not in _sub.columns or all(x is None or math.isnan(x) for x in _sub["x"]):
            # One run per policy: bars.
            _ax.bar(_sub["policy"].to_list(), _sub[_col].fill_null(float("nan")).to_list(), color="tab:blue")
            _ax.tick_params(axis="x", rotation=30)
        else:
            # A sweep (rate or SLO scale): one line per policy over the swept value.
            for _p in _sub["policy"].unique(maintain_order=True):
                _s = _sub.filter(pl.col("policy") == _p).sort("x")
                _ax.plot(_s["x"], _s[_col], marker="o", label=_p)
            _ax.set_xlabel(
                {
                    "rate-sweep": "request rate (req/s)",
                    "frontier": "high-phase load (x nominal capacity)",
                    "slo-sweep": "SLO scale",
                }.get(_sub["experiment"][0] if "experiment" in _sub.columns else "", "swept value")
            )
            _ax.legend(fontsize=7)
        _ax.set(title=_setting, ylabel=metric.selected_key)
        _ax.grid(alpha=0.3)
    _fig.tight_layout()
    _fig
    return (shown,)


@app.cell
def _(mo, rounded_frame, shown):
    _cols = [
        "setting",
        "policy",
        "x",
        "rate",
        "slo_s",
        "slo_attainment",
        "slo_attainment_low",
        "slo_attainment_high",
        "mean_latency_s",
        "p99_latency_s",
        "quality",
        "goodput",
        "goodput_high",
        "mean_threshold",
        "requests",
        "finished",
        "rejected",
        "migrations",
        "reconfig_launches",
    ]
    # Rounded, and without columns that hold nothing (x is empty unless the experiment sweeps).
    mo.ui.table(
        rounded_frame(shown.select([c for c in _cols if c in shown.columns])), selection=None, label="per policy"
    )
    return


@app.cell
def _(FuncFormatter, NullFormatter, mo, pl, plt, policy_filter, requests):
    # Where each policy's requests land against the SLO: latency / SLO, finished requests only.
    mo.stop(requests is None or not {"status", "latency_s", "deadline_s", "arrival_s"} <= set(requests.columns))
    _done = requests.filter((pl.col("status") == "finished") & pl.col("policy").is_in(policy_filter.value))
    mo.stop(_done.is_empty())
    _fig, _ax = plt.subplots(figsize=(6.5, 3.5))
    for _key, _g in _done.group_by("setting", "policy", maintain_order=True):
        _ratio = (_g["latency_s"] / (_g["deadline_s"] - _g["arrival_s"])).sort().to_numpy()
        _ax.plot(_ratio, [(i + 1) / len(_ratio) for i in range(len(_ratio))], label=" / ".join(_key))
    _ax.axvline(1.0, color="k", ls="--", lw=0.8)
    _ax.set(xscale="log", xlabel="latency / SLO", ylabel="share of requests", title="latency relative to the SLO")
    # Plain tick labels (0.1, 1, 10), not 10^-1: easier to read, and no mathtext to typeset.
    _ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    _ax.xaxis.set_minor_formatter(NullFormatter())
    _ax.grid(alpha=0.3)
    _ax.legend(fontsize=7)
    _fig.tight_layout()
    _fig
    return


@app.cell
def _(folder, mo):
    # The report's own plots and summary, as `python -m dilaserve.eval` wrote them.
    _pngs = sorted(folder.glob("*.png"))
    _summary = (folder / "summary.md").read_text() if (folder / "summary.md").exists() else ""
    mo.ui.tabs({"summary.md": mo.md(_summary), **{p.name: mo.image(src=p) for p in _pngs}})
    return


if __name__ == "__main__":
    app.run()
