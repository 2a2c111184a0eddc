import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="DiLaServe: threshold explorer")


@app.cell
def _():
    import os

    import marimo as mo
    import matplotlib.pyplot as plt
    import numpy as np
    import polars as pl

    from dilaserve import artifacts
    from dilaserve.control.thresholds import CANDIDATE_THRESHOLDS
    from dilaserve.engine import DEFAULT_CHECKPOINT, DenoisingEngine
    from dilaserve.serve.app_logic import step_axis
    from dilaserve.tasks import TASKS, task_suite
    from dilaserve.utils.display import rounded_rows

    return (
        CANDIDATE_THRESHOLDS,
        DEFAULT_CHECKPOINT,
        DenoisingEngine,
        TASKS,
        artifacts,
        mo,
        np,
        os,
        pl,
        plt,
        rounded_rows,
        step_axis,
        task_suite,
    )


@app.cell
def _(mo):
    mo.md("""
    # Threshold explorer

    A denoising step commits every masked token whose confidence clears the threshold: a
    lower threshold takes fewer steps and makes more mistakes. This notebook shows that
    trade-off as the offline pipeline measured it (the threshold-quality and step-feature
    tables), how well the step predictor foresees the remaining steps, and replays one
    request step by step on the embedded model.

    Open with `marimo edit notebooks/thresholds.py`; headless:
    `python notebooks/thresholds.py --artifacts=DIR --prompts=1` (or set `$DILASERVE_ARTIFACTS`).
    """)
    return


@app.cell
def _(DEFAULT_CHECKPOINT, artifacts, mo, os):
    # --artifacts=DIR (else $DILASERVE_ARTIFACTS, else data/artifacts), --prompts=N task
    # prompts per task to pick from, --checkpoint=DIR the model the replay decodes with.
    args = mo.cli_args()
    root = str(args.get("artifacts") or os.environ.get(artifacts.ENV_VAR) or artifacts.DEFAULT_ROOT)
    prompts_per_task = int(args.get("prompts", 4))
    checkpoint = str(args.get("checkpoint") or DEFAULT_CHECKPOINT)
    mo.md(f"Artifacts: `{root}`")
    return checkpoint, prompts_per_task, root


@app.cell
def _(artifacts, mo, root):
    def load(loader):
        """The artifact, or None and a callout naming the command that builds it."""
        try:
            return loader(root), None
        except artifacts.MissingArtifactError as e:
            print(f"missing artifact: {e}")
            return None, mo.callout(mo.md(f"**Missing artifact.**\n\n```\n{e}\n```"), kind="warn")

    return (load,)


@app.cell
def _(artifacts, load):
    quality, quality_missing = load(artifacts.load_threshold_quality)
    step_table, steps_missing = load(artifacts.load_step_table)
    evaluation, evaluation_missing = load(artifacts.load_predictor_evaluation)
    return evaluation, evaluation_missing, quality, quality_missing, step_table, steps_missing


@app.cell
def _(mo):
    mo.md("""
    ## Speed against quality
    """)
    return


@app.cell
def _(mo, plt, quality, quality_missing, rounded_rows):
    mo.stop(quality is None, quality_missing)
    _fig, _ax = plt.subplots(figsize=(6, 3.8))
    _steps = [r.mean_steps for r in quality.fixed]
    _acc = [100 * r.accuracy for r in quality.fixed]
    _ax.plot(_steps, _acc, marker="o", label="fixed threshold")
    for _r in quality.fixed:
        # Above and to the left of its point, off the rising line and the mix's square below
        # it; the margins keep the top point's label inside the frame.
        _ax.annotate(
            f"{_r.threshold:g}",
            (_r.mean_steps, 100 * _r.accuracy),
            textcoords="offset points",
            xytext=(-5, 5),
            ha="right",
            fontsize=8,
        )
    _ax.margins(x=0.1, y=0.12)
    if quality.mixed.n:
        _ax.scatter(
            [quality.mixed.mean_steps],
            [100 * quality.mixed.accuracy],
            color="tab:red",
            marker="s",
            label=f"random per-step mix (mean thr {quality.mixed.mean_threshold:.2f})",
        )
    _ax.set(xlabel="mean denoising steps per request", ylabel="accuracy (%)", title="speed-quality frontier")
    _ax.grid(alpha=0.3)
    _ax.legend(fontsize=8)
    _fig.tight_layout()
    _rows = rounded_rows(
        [
            {
                "threshold": r.threshold,
                "accuracy (%)": 100 * r.accuracy,
                "mean steps": r.mean_steps,
                "steps per token": r.steps_per_token,
                "requests": r.n,
            }
            for r in quality.fixed
        ],
        3,
    )
    mo.vstack(
        [
            _fig,
            mo.ui.table(_rows, selection=None),
            mo.md(
                f"Mixed thresholds: measured accuracy {100 * quality.mixed.accuracy:.1f}% against "
                f"{100 * quality.mixed.expected_accuracy:.1f}% predicted from the fixed rows "
                f"(mix factor {quality.mix_factor:.2f})."
            ),
        ]
    )
    return


@app.cell
def _(mo):
    mo.md("""
    ## Step counts
    """)
    return


@app.cell
def _(mo, np, pl, plt, step_table, steps_missing):
    mo.stop(step_table is None, steps_missing)
    # One row per step: a request's step count at a threshold is its number of rows.
    per_request = step_table.group_by("request_id", "threshold").agg(pl.len().alias("steps")).sort("threshold")
    _thresholds = per_request["threshold"].unique().sort().to_list()
    # Small multiples, one panel per threshold on shared axes, rather than overlaid histograms.
    _fig, _axes = plt.subplots(
        1, len(_thresholds), figsize=(2.3 * len(_thresholds) + 1, 2.6), sharex=True, sharey=True, squeeze=False
    )
    _bins = np.arange(0.5, per_request["steps"].max() + 1.5, max(1, per_request["steps"].max() // 30))
    for _ax, _t in zip(_axes[0], _thresholds):
        _s = per_request.filter(pl.col("threshold") == _t)["steps"]
        _ax.hist(_s, bins=_bins, color="tab:blue")
        _ax.axvline(_s.median(), color="k", lw=1, ls="--")
        _ax.set_title(f"threshold {_t:g}: median {_s.median():g}", fontsize=9)
        _ax.set_xlabel("steps per request")
        _ax.grid(alpha=0.3)
    _axes[0][0].set_ylabel("requests")
    _fig.tight_layout()
    # Tokens committed per step are bimodal (one or two, or the rest of a block when the
    # answer's end-of-text fills it), so a box plot would be all whisker: shares per bucket.
    _buckets = [(1, 1, "1"), (2, 2, "2"), (3, 4, "3-4"), (5, 8, "5-8"), (9, 16, "9-16"), (17, 10**9, "17+")]
    _fig2, _ax2 = plt.subplots(figsize=(7.5, 0.9 + 0.4 * len(_thresholds)))
    _left = np.zeros(len(_thresholds))
    _colors = plt.cm.viridis(np.linspace(0, 0.95, len(_buckets)))
    for (_lo, _hi, _name), _c in zip(_buckets, _colors):
        _share = np.array(
            [
                step_table.filter((pl.col("threshold") == _t) & pl.col("tokens_committed").is_between(_lo, _hi)).height
                / max(1, step_table.filter(pl.col("threshold") == _t).height)
                for _t in _thresholds
            ]
        )
        _ax2.barh([f"{_t:g}" for _t in _thresholds], 100 * _share, left=100 * _left, color=_c, label=_name)
        _left += _share
    _ax2.set(xlabel="share of steps (%)", ylabel="threshold", xlim=(0, 100), title="tokens committed per step")
    _ax2.legend(title="tokens", fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    _fig2.tight_layout()
    mo.vstack([_fig, _fig2])
    return


@app.cell
def _(mo):
    mo.md("""
    ## Remaining-step prediction
    """)
    return


@app.cell
def _(evaluation, evaluation_missing, mo, plt, rounded_rows):
    mo.stop(evaluation is None, evaluation_missing)
    # Held-out requests, grouped by how far through its steps a request was (progress decile).
    _fig, _ax = plt.subplots(figsize=(6.5, 3.5))
    for _name in dict.fromkeys(r["predictor"] for r in evaluation["by_decile"]):
        _rows = [r for r in evaluation["by_decile"] if r["predictor"] == _name]
        _ax.plot([10 * r["decile"] + 5 for r in _rows], [100 * r["rel_err"] for r in _rows], marker="o", label=_name)
    _ax.set(
        xlabel="progress (% of the request's steps done)",
        ylabel="mean relative error (%)",
        title="remaining-step error by progress",
    )
    _ax.grid(alpha=0.3)
    _ax.legend(fontsize=8)
    _fig.tight_layout()
    _overall = [
        {
            "predictor": r["predictor"],
            "held-out requests": r["n"],
            "mean absolute error (steps)": r["mae"],
            "mean relative error (%)": 100 * r["rel_err"],
        }
        for r in evaluation["overall"]
    ]
    mo.vstack([_fig, mo.ui.table(rounded_rows(_overall, 3), selection=None, label="overall (held-out requests)")])
    return


@app.cell
def _(mo):
    mo.md("""
    ## Replay a request
    """)
    return


@app.cell
def _(CANDIDATE_THRESHOLDS, mo, prompts_per_task, quality, task_suite):
    # Thresholds measured by the pipeline, else the candidate set the controller uses.
    _candidates = [r.threshold for r in quality.fixed] if quality is not None else list(CANDIDATE_THRESHOLDS)
    instances = task_suite(prompts_per_task, seed=0)
    threshold = mo.ui.slider(steps=sorted(_candidates), value=max(_candidates), label="threshold", show_value=True)
    # A prompt starts with its task's name: it is its own label.
    request = mo.ui.dropdown(
        {inst.prompt: i for i, inst in enumerate(instances)}, value=instances[0].prompt, label="request"
    )
    mo.hstack([threshold, request], justify="start")
    return instances, request, threshold


@app.cell
def _(DenoisingEngine, checkpoint, mo):
    # Loaded once: changing the threshold or the request only re-runs the replay.
    with mo.status.spinner(title="Loading the model"):
        engine = DenoisingEngine.from_pretrained(checkpoint)
    return (engine,)


@app.cell
def _(TASKS, engine, instances, mo, request, threshold):
    inst = instances[request.value]
    state = engine.new_request(inst.prompt, inst.gen_length)
    # Snapshot the canvas after every step: the slider below scrubs through them.
    snapshots = [state.response.copy()]
    with mo.status.spinner(title=f"Decoding at threshold {threshold.value:g}"):
        while not state.finished:
            engine.step([state], [threshold.value])
            snapshots.append(state.response.copy())
    engine.release(state.request_id)
    answer = engine.decode(state)
    verdict = TASKS[inst.task].verdict(inst, answer)
    print(f"replay at {threshold.value:g}: {state.steps_done} steps, answer {answer!r}, correct {verdict.correct}")
    return answer, snapshots, state, verdict


@app.cell
def _(mo, state):
    step = mo.ui.slider(0, state.steps_done, value=state.steps_done, label="after step", show_value=True)
    step
    return (step,)


@app.cell
def _(answer, engine, mo, plt, snapshots, state, step, step_axis, verdict):
    _now, _before = snapshots[step.value], snapshots[max(step.value - 1, 0)]
    _tokens = engine.tokenizer.convert_ids_to_tokens(_now.tolist())
    _cells = []
    for _i, _tok in enumerate(_tokens):
        if _now[_i] == state.mask_id:
            _cells.append('<span style="color:#bbb">&#9617;</span>')
        elif _now[_i] == state.eos_id:
            _cells.append('<span style="color:#bbb;font-size:70%">eos</span>')
        elif step.value and _now[_i] != _before[_i]:  # committed by this very step
            _cells.append(f"<mark><b>{_tok}</b></mark>")
        else:
            _cells.append(_tok)
    _canvas = mo.Html('<div style="font-family:monospace;line-height:1.8">' + " ".join(_cells) + "</div>")
    _fig, _ax = plt.subplots(figsize=(6.5, 2.2))
    _ax.bar(range(1, state.steps_done + 1), state.tokens_per_step, color="tab:blue")
    if step.value:
        _ax.bar([step.value], [state.tokens_per_step[step.value - 1]], color="tab:red")
    # whole steps, also for a replay of one step (a locator alone would label 0.6 to 1.4)
    _xlim, _xticks = step_axis(state.steps_done)
    _ax.set(xlabel="step", ylabel="tokens committed", title="tokens committed per step", xlim=_xlim, xticks=_xticks)
    _ax.yaxis.get_major_locator().set_params(integer=True)
    _fig.tight_layout()
    mo.vstack(
        [
            mo.md(
                f"Step **{step.value}** of {state.steps_done} (highlighted: tokens this step committed; "
                f"&#9617;: still masked)."
            ),
            _canvas,
            _fig,
            mo.md(f"Final answer: `{answer}`: {verdict.markdown()}."),
        ]
    )
    return


if __name__ == "__main__":
    app.run()
