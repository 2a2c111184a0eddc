import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="DiLaServe: reconfiguration explorer")


@app.cell
def _():
    from collections import Counter
    from dataclasses import replace

    import marimo as mo
    import matplotlib.pyplot as plt
    import numpy as np

    from dilaserve import artifacts
    from dilaserve.control.step_law import StepLaw
    from dilaserve.profile.analytic import GPUS, MODELS, analytic_profile
    from dilaserve.reconfig.config import ClusterConfig, ReconfigConfig
    from dilaserve.reconfig.monitor import RequestClass
    from dilaserve.reconfig.plan import static_layout
    from dilaserve.reconfig.reconfigurator import Reconfigurator
    from dilaserve.reconfig.stage1 import (
        check_capacity_plan,
        class_latency,
        load_and_capacity,
        solve_capacity,
        step_latency_table,
    )
    from dilaserve.utils.display import rounded_rows

    return (
        ClusterConfig,
        Counter,
        GPUS,
        MODELS,
        ReconfigConfig,
        Reconfigurator,
        RequestClass,
        StepLaw,
        analytic_profile,
        artifacts,
        check_capacity_plan,
        class_latency,
        load_and_capacity,
        mo,
        np,
        plt,
        replace,
        rounded_rows,
        solve_capacity,
        static_layout,
        step_latency_table,
    )


@app.cell
def _(mo):
    mo.md("""
    # Reconfiguration explorer

    Set the cluster shape, the arrival rate of each request class and the SLO; the two-stage
    ILP of `dilaserve.reconfig` is solved live. **Stage 1** picks how many instances of each
    TP degree every node runs, one batch size per degree, and how each class's denoising
    steps split across thresholds and TP degrees (maximising the rate-weighted average
    threshold). **Stage 2** places the new instances so that as many running ones as
    possible survive, and yields the migration plan from the current configuration.

    Open with `marimo edit notebooks/reconfig.py`; headless:
    `python notebooks/reconfig.py --nodes=1 --gpus-per-node=2 --rate-scale=0.125`.
    """)
    return


@app.cell
def _(mo):
    # Command-line defaults for the widgets, so headless runs stay small.
    args = mo.cli_args()
    default_nodes = int(args.get("nodes", 4))
    default_gpn = str(args.get("gpus-per-node", 4))
    default_time_limit = float(args.get("time-limit-s", 5.0))
    # Scales the default arrival rates (sized for 16 GPUs) to a smaller or larger cluster.
    rate_scale = float(args.get("rate-scale", 1.0))
    default_slo_scale = float(args.get("slo-scale", 5.0))
    default_current_tp = args.get("current-tp")
    return default_current_tp, default_gpn, default_nodes, default_slo_scale, default_time_limit, rate_scale


@app.cell
def _(GPUS, MODELS, artifacts, default_gpn, default_nodes, mo):
    # Analytic (roofline) profiles are computed here for any TP degree; stored profiles
    # come from the pipeline's artifacts when they exist.
    profile_options = [f"analytic: {m} on {g}" for m in MODELS for g in GPUS]
    profile_options += [f"stored: {n}" for n in artifacts.available_profiles()]
    nodes = mo.ui.slider(1, 16, value=default_nodes, label="nodes", show_value=True)
    gpus_per_node = mo.ui.dropdown(["1", "2", "4", "8"], value=default_gpn, label="GPUs per node")
    tp_choice = mo.ui.multiselect(["1", "2", "4", "8"], value=["1", "2", "4"], label="TP degrees")
    profile_name = mo.ui.dropdown(profile_options, value=profile_options[0], label="latency profile")
    mo.vstack([mo.md("### Cluster"), mo.hstack([nodes, gpus_per_node, tp_choice, profile_name], justify="start")])
    return gpus_per_node, nodes, profile_name, tp_choice


@app.cell
def _(default_slo_scale, default_time_limit, mo, rate_scale):
    # Request classes: (prompt tokens, output tokens), the shape of the monitor's length buckets.
    # Default rates: about 90% of what 16 H100s carry at the lowest threshold when every block is
    # priced as one recompute step plus its cache steps (twice these is infeasible). At that load
    # the top threshold alone no longer fits: stage 1 lowers the long classes' thresholds, and
    # the running all-TP-2 cluster cannot meet the SLOs, so the plan is adopted.
    shapes = [(256, 128), (256, 512), (1024, 256), (1024, 1024)]
    rates = mo.ui.array(
        [
            mo.ui.number(
                start=0.0,
                stop=1000.0,
                step=0.5,
                value=round(v * rate_scale, 3),
                label=f"prompt {p} / output {o} (req/s)",
            )
            for (p, o), v in zip(shapes, (21.0, 10.5, 14.0, 5.5))
        ]
    )
    slo_scale = mo.ui.slider(
        1.0,
        10.0,
        step=0.5,
        value=default_slo_scale,
        show_value=True,
        label="SLO scale (x latency alone on TP-1 at threshold 0.9)",
    )
    time_limit = mo.ui.number(start=0.5, stop=60.0, step=0.5, value=default_time_limit, label="ILP time limit (s)")
    mo.vstack(
        [
            mo.md("### Workload"),
            mo.md("Arrival rate of each request class:"),
            rates.vstack(),
            mo.hstack([slo_scale, time_limit], justify="start"),
        ]
    )
    return rates, shapes, slo_scale, time_limit


@app.cell
def _(ClusterConfig, analytic_profile, artifacts, gpus_per_node, mo, nodes, profile_name, tp_choice):
    gpn = int(gpus_per_node.value)
    # A TP group never spans nodes: degrees that do not divide the node are dropped, and said so.
    degrees = sorted(int(d) for d in tp_choice.value if gpn % int(d) == 0)
    dropped = sorted(int(d) for d in tp_choice.value if gpn % int(d))
    mo.stop(not degrees, mo.callout(mo.md(f"No chosen TP degree fits a node of {gpn} GPUs: pick TP 1."), kind="warn"))
    _kind, _name = profile_name.value.split(": ", 1)
    if _kind == "analytic":
        _model, _gpu = _name.split(" on ")
        profile = analytic_profile(_model, _gpu, degrees)
    else:
        profile = artifacts.load_profile(_name)
    cluster = ClusterConfig(
        nodes=nodes.value,
        gpus_per_node=gpn,
        tp_degrees=tuple(degrees),
        max_batch_tokens={d: 32768 * d for d in degrees},
    )
    _notes = [
        f"Cluster: {cluster.nodes} x {gpn} = {cluster.total_gpus} GPUs, TP {degrees}, profile `{profile.name}` "
        f"(has TP {list(profile.tp_degrees)})."
    ]
    if dropped:
        _notes.append(f"TP {dropped} dropped: it does not divide {gpn} GPUs per node.")
    mo.md("\n\n".join(_notes))
    return cluster, profile


@app.cell
def _(
    ReconfigConfig,
    Reconfigurator,
    RequestClass,
    StepLaw,
    artifacts,
    cluster,
    profile,
    rates,
    shapes,
    slo_scale,
    step_latency_table,
    time_limit,
):
    config = ReconfigConfig(time_limit_s=float(time_limit.value))
    # Steps per block from the recorded step dynamics when the pipeline has built them.
    try:
        config = config.with_step_law(StepLaw.from_dynamics(artifacts.load_step_dynamics(), config.block_length))
    except FileNotFoundError:
        print("no step dynamics artifact: stage 1 uses the built-in tokens-per-step rates")
    rec = Reconfigurator(cluster, profile, config)
    _mean_tokens = sum(p + o for p, o in shapes) / len(shapes)
    _cache, _recompute = step_latency_table(profile, cluster, rec.degrees, _mean_tokens, config.block_length)
    # The SLO of a class: scale x its latency alone on the smallest TP degree at threshold 0.9,
    # in stage 1's own latency model: steps = output / tokens-per-step, batch 1, one recompute
    # step per block and cache steps for the rest.
    _t_high = config.tokens_per_step[max(config.tokens_per_step)]
    _d = min(rec.degrees)
    _blocks = (lambda o: o / config.block_length) if _recompute else (lambda o: 0.0)
    _alone = {
        o: _blocks(o) * (_recompute or _cache)[_d, 1] + (o / _t_high - _blocks(o)) * _cache[_d, 1] for _, o in shapes
    }
    classes = [
        RequestClass(
            (i, 0),
            rate=float(r),
            prompt_tokens=float(p),
            output_tokens=float(o),
            slo_s=float(slo_scale.value) * _alone[o],
        )
        for i, ((p, o), r) in enumerate(zip(shapes, rates.value))
        if r > 0
    ]
    return classes, config, rec


@app.cell
def _(check_capacity_plan, classes, config, mo, np, rec, solve_capacity):
    class_labels = [f"p{int(k.prompt_tokens)}/o{int(k.output_tokens)}" for k in classes]
    mo.stop(not classes, mo.callout(mo.md("Give at least one class a positive arrival rate."), kind="warn"))
    problem = rec.problem(classes)
    with mo.status.spinner(title="Solving stage 1 (capacity planning)"):
        plan = solve_capacity(problem, config.time_limit_s, config.tiebreak_time_s)
    violations = check_capacity_plan(problem, plan) if plan is not None else []
    if plan is None:
        print("stage 1: infeasible or unsolved within the time limit")
    else:
        print(
            f"stage 1: counts {plan.counts} batch {plan.batch} quality {plan.quality:.4f} "
            f"slack {plan.slack:.3f} ({plan.solve.solver}, {plan.solve.seconds:.2f}s)"
        )
        _mean = (plan.steps_at @ np.array(problem.thresholds)) / np.maximum(plan.steps_at.sum(axis=1), 1e-9)
        print("stage 1: mean threshold per class " + ", ".join(f"{lab} {t:.3f}" for lab, t in zip(class_labels, _mean)))
    return class_labels, plan, problem, violations


@app.cell
def _(class_labels, classes, config, mo, plan, rec, replace, solve_capacity, violations):
    _why = ""
    if plan is None:
        # Which class is the obstacle: solve stage 1 for each class alone on the whole cluster.
        _limit = min(config.time_limit_s, 2.0)
        _feasible = lambda ks: solve_capacity(rec.problem(ks), _limit, config.tiebreak_time_s) is not None  # noqa: E731
        with mo.status.spinner(title="Stage 1 is infeasible: solving each class alone"):
            # At its own rate; then at a trickle, which tells a too-tight SLO from a too-high rate.
            _blocked = [
                (lab, _feasible([replace(k, rate=1e-3)])) for k, lab in zip(classes, class_labels) if not _feasible([k])
            ]
        _reasons = [
            f"**{lab}** "
            + (
                "needs more of the cluster than it has, even alone, at its rate"
                if ok_at_trickle
                else "cannot meet its SLO even alone: a single request at the lowest threshold on "
                "the fastest TP degree takes longer than the SLO"
            )
            for lab, ok_at_trickle in _blocked
        ]
        if _reasons:
            _why = "; ".join(_reasons) + ". Raise the SLO scale, lower that class's rate or add nodes."
        else:
            _why = (
                "Each class alone meets its SLO; together they need more instance-seconds per second than "
                "the cluster has. Lower the rates or add nodes."
            )
        print(f"stage 1 infeasible; classes infeasible alone: {[lab for lab, _ in _blocked]}")
    mo.stop(
        plan is None,
        mo.callout(
            mo.md(
                "**Stage 1 is infeasible** (or found no solution in the time limit): no TP mix serves these rates "
                f"within the SLO. {_why}\n\n**Stage 2 is empty** because it places stage 1's plan, and there is none; "
                "the running reconfigurator keeps all TP-1 in this case."
            ),
            kind="danger",
        ),
    )
    _chosen = sorted(d for d, n in plan.counts.items() if n)
    _msg = [
        f"**Chosen TP mix:** {', '.join(f'{plan.counts[d]} x TP-{d}' for d in _chosen) or 'none'}; "
        f"batch size {', '.join(f'{plan.batch[d]} on TP-{d}' for d in _chosen)}.",
        f"Average threshold per output token (rate-weighted): **{plan.quality:.3f}**; mean SLO slack "
        f"{100 * plan.slack:.0f}%; solved by {plan.solve.solver} in {plan.solve.seconds:.2f} s ({plan.solve.status}).",
    ]
    if violations:
        _msg.append("Constraint check found: " + "; ".join(map(str, violations)))
    mo.callout(mo.md("\n\n".join(_msg)), kind="warn" if violations else "success")
    return


@app.cell
def _(class_latency, mo, np, plan, plt, problem, rounded_rows):
    mo.stop(plan is None)
    # Share of each class's steps at each threshold (rows of s[k, c]), and its latency vs SLO.
    _share = plan.steps_at / np.maximum(plan.steps_at.sum(axis=1, keepdims=True), 1e-9)
    _labels = [f"p{int(k.prompt_tokens)}/o{int(k.output_tokens)}" for k in problem.classes]  # as class_labels
    _fig, (_a1, _a2) = plt.subplots(1, 2, figsize=(11, 3.4))
    _bottom = np.zeros(len(_labels))
    for _c, _t in enumerate(problem.thresholds):
        _a1.bar(_labels, _share[:, _c], bottom=_bottom, label=f"{_t:g}")
        _bottom += _share[:, _c]
    _a1.set(ylabel="share of steps", ylim=(0, 1), title="threshold split per class")
    # beside the bars, not over the last one
    _a1.legend(title="threshold", fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    _lat = class_latency(problem, plan.batch, plan.steps_on, plan.recompute_on)
    _mean = (plan.steps_at @ np.array(problem.thresholds)) / np.maximum(plan.steps_at.sum(axis=1), 1e-9)
    _slo = np.array([k.slo_s for k in problem.classes])
    _x = np.arange(len(_labels))
    _a2.bar(_x - 0.2, _lat, 0.4, label="planned latency")
    _a2.bar(_x + 0.2, _slo, 0.4, label="SLO")
    _a2.set_xticks(_x, _labels)
    _a2.set(ylabel="seconds", title="latency per class vs SLO")
    _a2.legend(fontsize=7)
    _fig.tight_layout()
    _table = [
        {
            "class": lab,
            "rate (req/s)": k.rate,
            "steps": float(plan.steps_at[i].sum()),
            **{f"steps on TP-{d}": float(plan.steps_on[i, j]) for j, d in enumerate(problem.degrees)},
            "latency (s)": float(_lat[i]),
            "SLO (s)": k.slo_s,
        }
        for i, (lab, k) in enumerate(zip(_labels, problem.classes))
    ]
    # One number of decimals per column: rates and steps to 0.1, seconds to 0.01.
    _formats = {k: ("{:.2f}" if "(s)" in k else "{:.1f}") for k in _table[0] if k != "class"}
    mo.vstack(
        [
            _fig,
            mo.md(
                "Mean threshold per class: "
                + ", ".join(f"{lab} **{t:.2f}**" for lab, t in zip(_labels, _mean))
                + ". Below 0.9 the class trades accuracy for the capacity the load needs."
            ),
            mo.ui.table(
                rounded_rows(_table, 3),
                selection=None,
                format_mapping=_formats,
                # numbers to the right, names to the left, in both tables of the page
                text_justify_columns={k: "right" if k in _formats else "left" for k in _table[0]},
            ),
        ]
    )
    return


@app.cell
def _(load_and_capacity, mo, plan, plt, problem):
    mo.stop(plan is None)
    _lc = load_and_capacity(problem, plan)
    _ds = sorted(_lc)
    _fig, _ax = plt.subplots(figsize=(6, 3))
    # Side by side, each bar with its value: a load drawn over its capacity would hide it.
    _x = range(len(_ds))
    _cap = _ax.bar([i - 0.2 for i in _x], [_lc[d][1] for d in _ds], 0.4, color="lightgrey", label="capacity")
    _load = _ax.bar([i + 0.2 for i in _x], [_lc[d][0] for d in _ds], 0.4, color="tab:blue", label="arrival load")
    for _bars in (_cap, _load):
        _ax.bar_label(_bars, fmt="%.1f", fontsize=8, padding=2)
    _ax.set_xticks(list(_x), [f"TP-{d}" for d in _ds])
    _ax.margins(y=0.15)
    _ax.set(ylabel="instance-seconds / s", title="capacity vs load per TP degree")
    _ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    _fig.tight_layout()
    _fig
    return


@app.cell
def _(cluster, default_current_tp, mo, plan):
    mo.stop(plan is None)  # stage 1's callout says why; no empty heading under it
    # The running configuration the migration plan starts from: a uniform cluster of one degree.
    # By default the first one that is not already the plan, so that stage 2 has work to show.
    _options = [f"all TP-{d}" for d in cluster.tp_degrees]
    _differs = [
        f"all TP-{d}"
        for d in cluster.tp_degrees
        if plan is None or {k: n for k, n in plan.counts.items() if n} != {d: cluster.total_gpus // d}
    ]
    _default = (
        f"all TP-{default_current_tp}" if f"all TP-{default_current_tp}" in _options else (_differs or _options)[0]
    )
    current_choice = mo.ui.dropdown(_options, value=_default, label="current configuration")
    mo.vstack([mo.md("### Migration plan (stage 2)"), current_choice])
    return (current_choice,)


@app.cell
def _(Counter, cluster, config, current_choice, mo, plan, problem, rec, replace, solve_capacity, static_layout):
    mo.stop(plan is None)
    existing = static_layout(cluster, int(current_choice.value.removeprefix("all TP-")), prefix="cur")
    # Score the running configuration the way the reconfigurator does: stage 1 with its counts pinned.
    _current = solve_capacity(
        replace(problem, fixed_counts=dict(Counter(e.tp for e in existing))),
        config.time_limit_s,
        config.tiebreak_time_s,
    )
    current_objective = _current.objective if _current else None
    migration = rec.plan_to(list(plan.node_counts), existing, plan.batch, plan.objective, current_objective)
    print(f"stage 2: keep {len(migration.keep)}, launch {len(migration.steps)}, stop {len(migration.stops)}")
    return current_objective, existing, migration


@app.cell
def _(config, current_objective, migration, plan):
    # One verdict for everything below it: the plan is applied (and its launches shown) or not.
    if current_objective is None:
        adopted = True
        verdict = (
            "**Adopted:** the current configuration cannot meet the SLOs, so the plan is applied without "
            f"waiting for the {100 * config.min_improvement:.0f}% improvement trigger."
        )
    else:
        _gain = plan.objective / current_objective - 1 if current_objective > 0 else float("inf")
        adopted = _gain >= config.min_improvement
        _change = "no change" if abs(_gain) < 5e-4 else f"{100 * _gain:+.1f}%"
        verdict = (
            f"**{'Adopted' if adopted else 'Kept as is'}:** objective {plan.objective:.3f} against the current "
            f"configuration's {current_objective:.3f} ({_change}), "
            + ("above" if adopted else "below")
            + f" the {100 * config.min_improvement:.0f}% improvement trigger"
            + ("." if adopted else ", so nothing is launched or stopped.")
        )
    print(f"verdict: {'adopted' if adopted else 'kept'}; launch {len(migration.steps) if adopted else 0}")
    return adopted, verdict


@app.cell
def _(adopted, cluster, existing, migration, mo, plt, verdict):
    _rows = [
        {
            "step": i + 1,
            "launch": s.launch.instance_id,
            "TP": s.launch.tp,
            "node": s.launch.node,
            "GPUs": ", ".join(map(str, s.launch.gpus)),
            "drain and stop first": ", ".join(s.stop_first) or "-",
        }
        for i, s in enumerate(migration.steps)
    ]
    # The placement drawn is the one applied: stage 1's mix where stage 2 put it (kept
    # instances and launches) when adopted, the running cluster when kept.
    _kept = set(migration.keep)
    if adopted:
        _layout = [(e, "kept") for e in existing if e.instance_id in _kept] + [
            (s.launch, "new") for s in migration.steps
        ]
        _title = "instances per node after the migration (hatched: kept running)"
    else:
        _layout = [(e, "kept") for e in existing]
        _title = "instances per node: the running cluster, kept as is"
    _colors = {1: "tab:blue", 2: "tab:orange", 4: "tab:green", 8: "tab:red"}
    _fig, _ax = plt.subplots(figsize=(7, 0.6 + 0.45 * cluster.nodes))
    for _e, _how in _layout:
        _ax.barh(
            _e.node,
            _e.tp,
            left=min(_e.gpus),
            color=_colors.get(_e.tp, "grey"),
            edgecolor="white",
            hatch="//" if _how == "kept" and adopted else None,
        )
        _ax.text(min(_e.gpus) + _e.tp / 2, _e.node, f"TP-{_e.tp}", ha="center", va="center", color="white", fontsize=8)
    _ax.set(xlabel="GPU", ylabel="node", xlim=(0, cluster.gpus_per_node), title=_title)
    _ax.set_yticks(range(cluster.nodes))
    _ax.set_xticks(range(cluster.gpus_per_node + 1))
    _ax.invert_yaxis()
    _fig.tight_layout()
    _summary = (
        f"From {len(existing)} running instances: keep **{len(migration.keep)}**, launch **{len(migration.steps)}**, "
        f"stop **{len(migration.stops)}**. Each launch below is one step: it first drains and stops the instances "
        "whose GPUs it needs."
        if adopted
        else f"Stage 2 would keep {len(migration.keep)} of the {len(existing)} running instances and launch "
        f"{len(migration.steps)}; it is not applied."
    )
    mo.vstack(
        [
            mo.callout(mo.md(verdict), kind="success" if adopted else "neutral"),
            mo.md(_summary),
            (
                mo.ui.table(
                    _rows,
                    selection=None,
                    page_size=min(len(_rows), 50),
                    text_justify_columns={
                        k: "right" if isinstance(v, (int, float)) else "left" for k, v in _rows[0].items()
                    },
                )
                if _rows
                else mo.md("_Nothing to launch: the current cluster is the plan._")
            )
            if adopted
            else mo.md(""),
            _fig,
        ]
    )
    return


if __name__ == "__main__":
    app.run()
