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

    from dilaserve.artifacts import MissingArtifactError
    from dilaserve.eval import plots
    from dilaserve.eval.context import SETTINGS, EvalContext, EvalOptions
    from dilaserve.eval.experiments import EXPERIMENTS
    from dilaserve.eval.report import adaptive_in, write
    from dilaserve.eval.saved_runs import find_runs, preferred
    from dilaserve.sim.traces import TraceFormatError
    from dilaserve.utils.display import rounded_frame

    return (
        EXPERIMENTS,
        EvalContext,
        EvalOptions,
        MissingArtifactError,
        Path,
        SETTINGS,
        TraceFormatError,
        adaptive_in,
        find_runs,
        math,
        mo,
        pl,
        plots,
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
    quick experiment from here (it needs the pipeline's artifacts; it goes to `results/quick/`
    and leaves full runs alone). A quick `trace` simulates every policy at each of four loads,
    one policy run after another; while it runs, the page shows each policy run as it finishes,
    the seconds each has taken so far on this machine, and the simulated seconds of the one in
    progress. The run stops when the page's session ends (its tab closed) or when you start
    another.

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
def _(mo):
    class QuickRunStopped(Exception):
        """The page that started a quick run went away (or ran the cell again): it stopped."""

    def with_progress(title, fn, cancelled=lambda: False):
        """``fn()`` under a spinner that says how far the simulation is: the policy runs done
        (the lines ``python -m dilaserve.eval`` prints to stderr as each one finishes), their
        pace so far, and the simulated seconds of the one in progress, read from its event
        loop once a second. When ``cancelled()`` turns true, or the cell is interrupted or run
        again, the simulation in progress stops and :class:`QuickRunStopped` is raised."""
        import contextlib
        import io
        import sys
        import time

        from dilaserve.sim.loop import EventLoop

        # Bound now: a session that ends clears the notebook's globals under a running thread.
        stopped = QuickRunStopped
        seen = {"loop": None, "until": None, "done": [], "over": False, "stop": False}
        _run = EventLoop.run

        def _watched_run(loop, until=None):
            if seen["stop"]:
                raise stopped()
            seen["loop"], seen["until"] = loop, until
            _run(loop, until)
            if seen["stop"]:  # stopped half-way: its numbers would be wrong, and nobody reads them
                raise stopped()

        class _Lines(io.TextIOBase):
            def write(self, text):
                seen["done"] += [ln.strip() for ln in text.splitlines() if ln.strip().startswith("[")]
                return sys.__stderr__.write(text)

        with mo.status.spinner(title=title) as spinner:

            def _poll():
                thread = mo.current_thread()
                t0 = time.monotonic()
                while not seen["over"]:
                    loop, until = seen["loop"], seen["until"]
                    if (thread.should_exit or cancelled()) and loop is not None:
                        seen["stop"] = True
                        loop.stop()
                    n, elapsed = len(seen["done"]), time.monotonic() - t0
                    # The pace is measured, not promised: the machine's load sets it.
                    pace = f", {elapsed / n:.0f} s each so far" if n else ""
                    clock = f"; this one at {loop.now:,.0f} of {until:,.0f} simulated s" if loop and until else ""
                    spinner.update(
                        title=f"{title}: {n} policy runs done in {elapsed:.0f} s{pace}{clock}",
                        subtitle=seen["done"][-1] if seen["done"] else None,
                    )
                    time.sleep(1.0)

            poller = mo.Thread(target=_poll, daemon=True)
            EventLoop.run = _watched_run
            try:
                poller.start()
                with contextlib.redirect_stderr(_Lines()):
                    return fn()
            finally:
                EventLoop.run = _run
                seen["over"] = True
                poller.join(timeout=2)

    return QuickRunStopped, with_progress


@app.cell
def _(mo):
    # Bumped when a quick run started from the page has written its results: the list of
    # runs below looks again.
    get_quick_runs, set_quick_runs = mo.state(0)
    return get_quick_runs, set_quick_runs


@app.cell
def _(
    EXPERIMENTS,
    EvalContext,
    EvalOptions,
    MissingArtifactError,
    QuickRunStopped,
    TraceFormatError,
    experiment,
    mo,
    quick_dir,
    run,
    run_on_load,
    set_quick_runs,
    settings,
    with_progress,
    write,
):
    import weakref

    class QuickRun:
        """A quick run started from the page. The run holds only a weak reference to it: when
        the page's session ends, the kernel drops its globals, this handle with them, and the
        simulation stops (it does not go on for minutes for nobody)."""

    def _quick(cancelled=lambda: False):
        # Bound now, not looked up when the run ends: a session that ends while the run is in
        # progress clears the notebook's globals (and so stops the run, below).
        errors = (MissingArtifactError, TraceFormatError)
        ctx = EvalContext(EvalOptions(quick=True, settings=tuple(settings.value) or ("paper",), out=quick_dir))
        try:
            with_progress(
                f"Running {experiment.value} (quick) on the simulator",
                lambda: write(EXPERIMENTS[experiment.value](ctx), ctx),
                cancelled,
            )
            return mo.callout(mo.md(f"Ran `{experiment.value}` (quick) into `{quick_dir}`."), kind="success")
        except errors as e:
            print(f"error: {e}")
            return mo.callout(mo.md(f"**The run needs pipeline artifacts.**\n\n```\n{e}\n```"), kind="danger")

    def _in_background(handle_ref, quick):
        thread, stopped = mo.current_thread(), QuickRunStopped  # bound before the globals can go
        try:
            mo.output.replace(quick(lambda: handle_ref() is None or thread.should_exit))
        except stopped:
            return  # the page is gone, or asked again: nothing to show
        except Exception as e:  # shown on the page, as the cell itself would show it
            mo.output.replace(mo.callout(mo.md(f"**The quick run failed:** `{e!r}`"), kind="danger"))
            return
        set_quick_runs(lambda n: n + 1)

    run_message, quick_run = None, None
    if run_on_load:
        # Headless (--run): in this cell, so that the run is done before the page is read.
        run_message = _quick()
    elif run.value:
        # In a browser: beside the kernel, so that the page stays live, and stopped with it.
        quick_run = QuickRun()
        mo.Thread(target=_in_background, args=(weakref.ref(quick_run), _quick), daemon=True).start()
    run_message
    return quick_run, run_message


@app.cell
def _(default_experiment, find_runs, get_quick_runs, mo, preferred, quick_dir, results_dir, run_message):
    run_message, get_quick_runs()  # look again after a run
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
def _():
    def axis_label(experiment):
        """What an experiment's ``x`` is, in words."""
        return {
            "trace": "high-phase load, x nominal capacity",
            "ablation": "high-phase load, x nominal capacity",
            "rate-sweep": "request rate, req/s",
            "frontier": "high-phase load, x nominal capacity",
            "slo-sweep": "SLO scale, x latency alone",
        }.get(experiment, "load")

    return (axis_label,)


@app.cell
def _(axis_label, chosen_run, mo, pl, saved):
    shown_run = saved[chosen_run.value]
    folder = shown_run.folder
    summary = pl.read_parquet(folder / "summary.parquet")
    requests = pl.read_parquet(folder / "requests.parquet") if (folder / "requests.parquet").exists() else None
    print(f"loaded {folder}: {summary.height} runs, policies {list(shown_run.policies)}")
    _kind = {
        "full": "a **full** run (what the README reports)",
        "quick": "a **quick** run (short phases: numbers differ from the README's full run)",
    }.get(shown_run.kind, "a run whose summary does not say quick or full")
    # Requests per policy at each load (or swept value): a sweep's loads differ in size.
    _per = (
        summary.group_by("x", maintain_order=True).agg(pl.col("requests").max()).sort("x")
        if {"x", "requests"} <= set(summary.columns)
        else None
    )
    if _per is not None and _per.height > 1 and _per["x"].is_not_nan().all():
        _counts = (
            "requests per policy: "
            + ", ".join(f"{n:,} at {x:g}" for x, n in zip(_per["x"], _per["requests"]))
            + f" ({axis_label(shown_run.experiment)})"
        )
    else:
        _counts = f"{shown_run.requests:,} requests per policy"
    mo.callout(
        mo.md(
            "\n".join(
                [
                    f"Showing `{folder}`: `{shown_run.experiment}`, {_kind}, written {shown_run.written:%Y-%m-%d %H:%M} UTC; "
                    f"settings {', '.join(f'`{x}`' for x in shown_run.settings)}; {_counts}.",
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
    # Shares are shown in percent, as in the table below.
    _metrics = {
        "SLO attainment (%)": "slo_attainment",
        "attainment, low load (%)": "slo_attainment_low",
        "attainment, high load (%)": "slo_attainment_high",
        "mean latency (s)": "mean_latency_s",
        "p99 latency (s)": "p99_latency_s",
        "quality (%)": "quality",
        "mean threshold": "mean_threshold",
        "goodput, in time and correct (%)": "goodput",
        "goodput, high load (%)": "goodput_high",
    }
    # Only the columns this run has (an experiment added later may write fewer or more).
    _metrics = {k: v for k, v in _metrics.items() if v in summary.columns}
    metric = mo.ui.dropdown(_metrics, value=next(iter(_metrics)), label="metric")
    mo.hstack([policy_filter, metric], justify="start")
    return metric, policy_filter


@app.cell
def _(adaptive_in, axis_label, math, metric, mo, pl, plots, plt, policy_filter, summary):
    shown = summary.filter(pl.col("policy").is_in(policy_filter.value))
    mo.stop(shown.is_empty(), mo.md("_Pick at least one policy._"))
    _col = metric.value
    _scale = 100.0 if metric.selected_key.endswith("(%)") else 1.0
    _settings = shown["setting"].unique(maintain_order=True).to_list()
    _adaptive = adaptive_in(shown)
    _panels = []
    for _setting in _settings:
        _sub = shown.filter(pl.col("setting") == _setting)
        _xs = {x for x in _sub["x"] if x is not None and not math.isnan(x)} if "x" in _sub.columns else set()
        if len(_xs) <= 1:
            # One run per policy (one load): a bar per policy, sorted, dilaserve and the best
            # static policy in colour; as tall as the policies need (a hindsight run has 20+).
            _vals = dict(zip(_sub["policy"], (_scale * _sub[_col].fill_null(float("nan"))).to_list()))
            _fig, _ax = plt.subplots(figsize=(7.5, 0.26 * len(_vals) + 1.3))
            plots.policy_bars(
                _ax,
                _vals,
                _adaptive,
                plots.best_static(_vals, _adaptive),
                metric.selected_key,
                fmt="%.1f" if _scale > 1 else "%.2f",
            )
            _where = f" ({axis_label(_sub['experiment'][0])} {next(iter(_xs)):g})" if _xs else ""
            _ax.set_title(f"{_setting}{_where}: dilaserve in red, the best static policy in green")
        else:
            # A sweep (rate or SLO scale): one line per policy over the swept value, the
            # legend beside the panel.
            _fig, _ax = plt.subplots(figsize=(7.5, 3.8))
            for _i, _p in enumerate(_sub["policy"].unique(maintain_order=True)):
                _s = _sub.filter(pl.col("policy") == _p).sort("x")
                _ax.plot(_s["x"], _scale * _s[_col], marker="o", ms=4, label=_p, **plots.line_style(_p, _i))
            _ax.set(xlabel=axis_label(_sub["experiment"][0] if "experiment" in _sub.columns else ""))
            _ax.set(title=_setting, ylabel=metric.selected_key)
            _ax.grid(alpha=0.3)
            plots.legend_beside(_ax)
        _fig.tight_layout()
        _panels.append(_fig)
    mo.vstack(_panels)
    return (shown,)


@app.cell
def _(axis_label, mo, pl, rounded_frame, shown):
    # The columns a reader compares, named in words, shares as percentages; the raw summary
    # (every column) is in the run's summary.parquet.
    _percent = {"slo_attainment": "SLO attainment (%)", "goodput": "goodput (%)", "quality": "quality (%)"}
    _plain = {
        "mean_latency_s": "mean latency (s)",
        "p99_latency_s": "p99 latency (s)",
        "mean_threshold": "mean threshold",
        "requests": "requests",
        "rejected": "refused",
    }
    _several = shown["setting"].n_unique() > 1
    _swept = "x" in shown.columns and shown["x"].is_not_nan().any() and shown["x"].n_unique() > 1
    _exp = shown["experiment"][0] if "experiment" in shown.columns else ""
    _table = rounded_frame(
        shown.select(
            *([pl.col("setting")] if _several else []),
            pl.col("policy"),
            *([pl.col("x").alias(axis_label(_exp))] if _swept else []),
            *[(100 * pl.col(c)).alias(n) for c, n in _percent.items() if c in shown.columns],
            *[pl.col(c).alias(n) for c, n in _plain.items() if c in shown.columns],
        ),
        3,
    )
    # One number of decimals per column: percentages to 0.1, seconds and thresholds to 0.01.
    _formats = {
        n: ("{:.1f}" if n.endswith("(%)") else "{:.2f}")
        for n in _table.columns
        if n.endswith("(%)") or n.endswith("(s)") or n == "mean threshold"
    }
    mo.ui.table(_table.to_dicts(), selection=None, label="per policy", format_mapping=_formats)
    return


@app.cell
def _(mo, pl, plots, plt, policy_filter, requests):
    # Where each policy's requests land against the SLO: latency / SLO, finished requests only.
    mo.stop(requests is None or not {"status", "latency_s", "deadline_s", "arrival_s"} <= set(requests.columns))
    _done = requests.filter((pl.col("status") == "finished") & pl.col("policy").is_in(policy_filter.value))
    mo.stop(_done.is_empty())
    _fig, _ax = plt.subplots(figsize=(9.5, 4.0))
    _several = _done["setting"].n_unique() > 1
    for _i, ((_setting, _policy), _g) in enumerate(_done.group_by("setting", "policy", maintain_order=True)):
        _ratio = (_g["latency_s"] / (_g["deadline_s"] - _g["arrival_s"])).sort().to_numpy()
        _ax.plot(
            _ratio,
            [(i + 1) / len(_ratio) for i in range(len(_ratio))],
            label=f"{_setting} / {_policy}" if _several else _policy,
            **plots.line_style(_policy, _i),
        )
    _ax.axvline(1.0, color="k", ls="--", lw=0.8)
    _ax.set(xscale="log", xlabel="latency / SLO", ylabel="share of requests", title="latency relative to the SLO")
    # Plain tick labels (0.1, 1, 10), not 10^-1: easier to read, and no mathtext to typeset.
    plots.plain_log_axis(_ax.xaxis)
    _ax.grid(alpha=0.3)
    plots.legend_beside(_ax)  # beside the lines, a colour per policy however many
    _fig.tight_layout()
    _fig
    return


@app.cell
def _(folder, mo):
    # The report's own plots and summary, as `python -m dilaserve.eval` wrote them.
    _pngs = sorted(folder.glob("*.png"))
    _summary = (folder / "summary.md").read_text() if (folder / "summary.md").exists() else ""

    def _shown(png):
        # At its own size, never shrunk (shrunk, a wide figure's 8 pt text is 5 px high): a
        # figure wider than the page scrolls sideways inside its own box.
        from PIL import Image

        with Image.open(png) as im:
            width = im.width
        return mo.Html(f'<div style="overflow-x: auto">{mo.image(src=png, width=width).text}</div>')

    # One after the other, each under its file name (a tab bar hides all but one, and its
    # labels do not show on an exported page).
    mo.vstack(
        [
            mo.md("## The report as written"),
            mo.md(_summary),
            *[mo.vstack([mo.md(f"**`{p.name}`**"), _shown(p)]) for p in _pngs],
        ]
    )
    return


if __name__ == "__main__":
    app.run()
