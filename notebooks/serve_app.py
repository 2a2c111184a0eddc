import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="DiLaServe: serving app")


@app.cell
def _():
    import os
    import weakref

    import marimo as mo
    import matplotlib.pyplot as plt

    from dilaserve.engine import DEFAULT_CHECKPOINT
    from dilaserve.schedule.policies import policies
    from dilaserve.serve import app_burst, app_logic, client, launcher

    return DEFAULT_CHECKPOINT, app_burst, app_logic, client, launcher, mo, os, plt, policies, weakref


@app.cell
def _(mo):
    mo.md("""
    # DiLaServe serving app

    Start the serving runtime (`python -m dilaserve.serve`: a local Ray cluster and two CPU
    instances of the embedded model; 20 to 40 s to become healthy, the seconds so far are shown
    while it starts), watch its live `/metrics`, and send prompts with an SLO. Each answer shows
    the denoising steps the request took and the threshold of every step, and whether it is
    correct when the prompt is one of the examples.

    One prompt alone, with a generous SLO, runs every step at the top threshold: the controller
    has no reason to act. **Send a burst** (at the bottom) sends several example prompts at once
    with an SLO below the slowest one's latency alone, and a few "tight" ones with a tenth of
    their own: the controller then lowers thresholds step by step to finish them in time, and
    refuses the requests it cannot finish, saying why.

    Open it with `marimo run notebooks/serve_app.py`. Headless:
    `python notebooks/serve_app.py --start --prompt="list : c a f b" --burst` starts the
    server, sends the prompt and the default burst, prints the answers and stops the server on
    exit (`--burst=N`: a burst of N prompts).
    """)
    return


@app.cell
def _(mo, os):
    # Command-line options, so the app also runs headless (tests, scripts):
    #   --start                    start the server on load
    #   --prompt=TEXT              send TEXT once the server is up
    #   --artifacts=DIR            pipeline artifacts the server loads (predictor, profiles)
    #   --reconfig-interval-s=N    seconds between reconfiguration ticks (0: off)
    #   --port=N                   the server's port (0: any free port)
    #   --burst[=N]                send the default burst (of N example prompts) once the server is up
    args = mo.cli_args()
    autostart = "start" in args
    headless_prompt = args.get("prompt")
    headless_burst = args.get("burst")
    artifacts_dir = str(args.get("artifacts") or os.environ.get("DILASERVE_ARTIFACTS") or "data/artifacts")
    default_reconfig_s = float(args.get("reconfig-interval-s", 60))
    default_port = int(args.get("port", 0))
    return artifacts_dir, autostart, default_port, default_reconfig_s, headless_burst, headless_prompt


@app.cell
def _(autostart, default_port, default_reconfig_s, mo, policies):
    # The oracle needs the true remaining steps, which only the simulator knows.
    policy = mo.ui.dropdown([n for n in policies.names() if n != "oracle"], value="dilaserve", label="policy")
    reconfig_s = mo.ui.number(
        start=0, stop=3600, step=10, value=default_reconfig_s, label="reconfiguration interval (s, 0 = off)"
    )
    port = mo.ui.number(start=0, stop=65535, step=1, value=default_port, label="port (0 = any free port)")
    # Each click flips the value: True starts the server, False stops it.
    toggle = mo.ui.button(
        value=autostart, on_click=lambda running: not running, label="start / stop the server", kind="success"
    )
    # wrap: on a narrow page the button goes to the next line whole, not clipped on two
    mo.hstack([policy, reconfig_s, port, toggle], justify="start", align="end", wrap=True)
    return policy, port, reconfig_s, toggle


@app.cell
def _(app_logic, artifacts_dir, launcher, mo, policy, port, reconfig_s, toggle, weakref):
    def _stop_when_invalidated(handle_ref):
        # Runs in a mo.Thread: marimo sets should_exit when this cell re-runs (button
        # clicked again, settings changed) or is deleted; then the server goes with it.
        # Only a weak reference is held, so a closed session that drops the handle also
        # stops the server (through the handle's finalizer).
        import time

        thread = mo.current_thread()
        while (handle := handle_ref()) is not None:
            if thread.should_exit or not handle.alive:
                handle.stop()
                return
            del handle
            time.sleep(0.5)

    server, start_error = None, None
    if toggle.value:
        flags = ["--policy", policy.value, "--reconfig-interval-s", str(reconfig_s.value), "--log-level", "warning"]
        with mo.status.spinner(title=app_logic.START_NOTE) as _spinner:
            try:
                _handle = launcher.start_server(
                    port=app_logic.port_choice(port.value), artifacts=artifacts_dir, extra_args=flags, wait=False
                )
                _tick = (
                    lambda s, line: _spinner.update(  # noqa: E731
                        title=f"{app_logic.START_NOTE}: {s:.0f} s so far", subtitle=line[-120:] or None
                    )
                )
                if app_logic.wait_until_healthy(_handle, 240.0, _tick):
                    server = _handle
                else:
                    _handle.stop()
                    start_error = (
                        f"the server on port {_handle.port} did not become healthy (exit code "
                        f"{_handle.proc.returncode}); end of its log {_handle.log_path}:\n{_handle.log_tail()}"
                    )
            except (RuntimeError, ValueError, OSError) as e:
                start_error = str(e)
        if server is not None:
            # daemon: a headless run exits without waiting; the handle's finalizer then stops the server
            mo.Thread(target=_stop_when_invalidated, args=(weakref.ref(server),), daemon=True).start()
            print(f"server pid {server.pid} healthy at {server.url}", flush=True)
    # The status is this cell's own output, so the spinner replaces it while the server
    # starts (a cell of its own would keep showing "stopped" under the spinner).
    if start_error:
        print(start_error, flush=True)
        _status = mo.callout(mo.md(f"**The server did not start.**\n\n```\n{start_error}\n```"), kind="danger")
    elif server is None:
        _status = mo.callout(mo.md("The server is stopped: click **start / stop the server**."), kind="neutral")
    else:
        _status = mo.callout(
            mo.md(f"Serving at `{server.url}` (pid {server.pid}); log: `{server.log_path}`"), kind="success"
        )
    _status
    return server, start_error


@app.cell
def _(mo):
    refresh = mo.ui.refresh(options=["1s", "2s", "5s", "10s"], default_interval="2s", label="metrics refresh")
    refresh
    return (refresh,)


@app.cell
def _(app_logic, client, mo, refresh, server):
    refresh  # re-scrape on every tick
    mo.stop(server is None, mo.md("_No metrics: the server is not running._"))
    try:
        metrics = client.fetch_metrics(server.url)
        print(f"metrics: {len(metrics)} dilaserve samples", flush=True)
    except Exception as e:  # the server may be shutting down between two ticks
        metrics = {}
        print(f"metrics unavailable: {e}")
    _get = lambda name: metrics.get(name, 0.0)  # noqa: E731
    _cards = mo.hstack(
        [
            mo.stat(f"{_get('dilaserve:num_requests_running'):.0f}", label="running"),
            mo.stat(f"{_get('dilaserve:num_requests_waiting'):.0f}", label="waiting"),
            mo.stat(f"{_get('dilaserve:slo_met_total'):.0f}", label="met their SLO"),
            mo.stat(
                app_logic.attainment_text(metrics),
                label="SLO attainment",
                caption=f"{app_logic.finished_requests(metrics)} finished",
            ),
            mo.stat(f"{_get('dilaserve:migrations_total'):.0f}", label="migrations"),
        ],
        justify="start",
    )
    _rows = app_logic.metric_rows(metrics)
    mo.vstack(
        [
            _cards,
            mo.ui.table(_rows, selection=None, page_size=12, label="live /metrics"),
        ]
    )
    return


@app.cell
def _(DEFAULT_CHECKPOINT, app_burst, app_logic, headless_burst, headless_prompt):
    # Never re-runs: the outbox remembers what was sent, so a server restart (which re-runs
    # the cells below) does not send the last prompt again.
    outbox = app_logic.Outbox()
    if headless_prompt:
        outbox.submit(app_logic.PromptRequest(str(headless_prompt), slo_ms=20_000, max_tokens=64))
    burst_outbox = app_logic.Outbox()
    if headless_burst is not None:
        burst_outbox.submit(app_burst.headless_burst(headless_burst))
    examples = app_logic.example_prompts(per_task=2)
    vocabulary = app_logic.checkpoint_vocabulary(DEFAULT_CHECKPOINT)
    return burst_outbox, examples, outbox, vocabulary


@app.cell
def _(app_logic, client, server):
    # The quality floors this server accepts: up to its highest candidate threshold.
    candidates = app_logic.candidates_from_health(client.health(server.url) if server is not None else None)
    return (candidates,)


@app.cell
def _(examples, mo):
    example = mo.ui.dropdown(list(examples), value=next(iter(examples)), label="example prompt")
    example
    return (example,)


@app.cell
def _(app_logic, candidates, example, examples, mo, outbox):
    _inst = examples[example.value]
    _floors = app_logic.floor_steps(candidates)
    # Rebuilt when the server restarts (its candidates may differ): from what was last sent.
    _v = app_logic.form_defaults(outbox.latest, _inst, _floors)
    form = (
        mo.md("""
    **Send a prompt** (the example above, or your own in the task language)

    {prompt}

    {slo_ms} {max_tokens} {min_threshold} {priority}
    """)
        .batch(
            prompt=mo.ui.text_area(value=_v["prompt"], full_width=True),
            slo_ms=mo.ui.number(start=100, stop=600_000, step=100, value=_v["slo_ms"], label="SLO (ms)"),
            # the example's canvas: its answer and an end-of-text fit
            max_tokens=mo.ui.number(start=1, stop=512, step=1, value=_v["max_tokens"], label="max tokens"),
            min_threshold=mo.ui.slider(
                steps=_floors,
                value=_v["min_threshold"],
                show_value=True,
                label=f"quality floor (min threshold, up to {_floors[-1]:g})",
            ),
            priority=mo.ui.number(start=-100, stop=100, step=1, value=_v["priority"], label="priority"),
        )
        .form(
            submit_button_label="Send",
            bordered=False,
            on_change=lambda value: outbox.submit(
                app_logic.PromptRequest.from_form(value, example=example.value) if value else None
            ),
        )
    )
    form
    return (form,)


@app.cell
def _(app_logic, client, form, outbox, server):
    form  # a submission re-runs this cell; the form's on_change has queued it in the outbox
    exchange = app_logic.send_pending(
        outbox,
        server.url if server is not None else None,
        lambda url, r: client.complete(
            url, r.prompt, max_tokens=r.max_tokens, slo_ms=r.slo_ms, priority=r.priority, min_threshold=r.min_threshold
        ),
    )
    if exchange is not None and exchange.reply is not None and exchange is outbox.last:
        _r = exchange.reply
        print(
            f"answer: {_r.text!r} steps: {_r.steps} thresholds: {_r.thresholds} latency_ms: {_r.latency_ms} "
            f"slo_met: {_r.slo_met} finish_reason: {_r.finish_reason}",
            flush=True,
        )
    elif exchange is not None and exchange.error:
        print(f"request failed: {exchange.error}", flush=True)
    return (exchange,)


@app.cell
def _(app_logic, examples, exchange, mo, plt, server, vocabulary):
    mo.stop(exchange is None, mo.md("_Submit the form to send a prompt._"))
    if exchange.error is not None:  # (mo.stop evaluates its output eagerly: build it only here)
        mo.stop(
            True,
            mo.callout(mo.md(exchange.error), kind="warn")
            if exchange.error == app_logic.NOT_STARTED
            else mo.callout(mo.md(f"**Request failed:** {exchange.error}"), kind="danger"),
        )
    _req, _reply = exchange.request, exchange.reply
    _notes = []
    if server is None or server.url != exchange.server_url:
        _notes.append(mo.md("_The server that gave this answer has stopped since._"))
    _unknown = app_logic.unknown_words(_req.prompt, vocabulary) if vocabulary else []
    if _unknown:
        _notes.append(
            mo.callout(
                mo.md(
                    "The model does not know "
                    + ", ".join(f"`{w}`" for w in _unknown)
                    + ": it reads them as one unknown token. Its language is the tasks' (`list`, `pairs`, `arith`)."
                ),
                kind="warn",
            )
        )
    _verdict = app_logic.grade(_req.prompt, _reply.text, examples)
    _ending = app_logic.ending_note(_req, _reply.finish_reason, app_logic.example_for(_req.prompt, examples))
    _line = f"**Answer:** {app_logic.answer_text(_reply.text)}"
    if _verdict is not None:
        _line += f": {_verdict.markdown()}"
    else:
        _line += " _(not graded: only the example prompts have a known answer)_"
    _fig, _ax = plt.subplots(figsize=(6, 2.2))
    _n = len(_reply.thresholds)
    _ax.step(range(1, _n + 1), _reply.thresholds, where="mid", marker="o")
    _xlim, _ticks = app_logic.step_axis(_n)
    _ax.set(
        xlabel="denoising step",
        ylabel="threshold",
        ylim=(0, 1.05),
        xlim=_xlim,
        xticks=_ticks,
        title="threshold of each step",
    )
    _ax.grid(alpha=0.3)
    _fig.tight_layout()
    mo.vstack(
        [
            *_notes,
            mo.md(_line),
            mo.callout(mo.md(_ending[1]), kind=_ending[0]) if _ending else mo.md(""),
            mo.hstack(
                [
                    mo.stat(str(_reply.steps), label="steps"),
                    mo.stat(f"{_reply.latency_ms:.0f} ms", label=f"latency (SLO {_reply.slo_ms:.0f} ms)"),
                    mo.stat("met" if _reply.slo_met else "missed", label="SLO"),
                    mo.stat(_reply.finish_reason or "-", label="finish reason"),
                    mo.stat(", ".join(_reply.instances) or "-", label="instances"),
                ],
                justify="start",
            ),
            _fig,
        ]
    )
    return


@app.cell
def _(app_burst, burst_outbox, mo):
    _d = app_burst.DEFAULT_BURST
    burst_form = (
        mo.md("""
    **Send a burst**: example prompts at once, each with an SLO of a multiple of the slowest
    one's latency alone (each is first sent alone, with nothing else running, to measure it);
    the tight ones ask for a tenth of their own latency alone

    {n} {slo_factor} {tight}
    """)
        .batch(
            n=mo.ui.slider(2, 16, value=_d.n, show_value=True, label="prompts"),
            slo_factor=mo.ui.slider(
                0.5, 6.0, step=0.1, value=_d.slo_factor, show_value=True, label="SLO (x the slowest latency alone)"
            ),
            tight=mo.ui.slider(0, 8, value=_d.tight, show_value=True, label="tight requests"),
        )
        .form(
            submit_button_label="Send the burst",
            bordered=False,
            on_change=lambda value: burst_outbox.submit(
                app_burst.BurstRequest(
                    int(value["n"]), float(value["slo_factor"]), min(int(value["tight"]), int(value["n"]))
                )
                if value
                else None
            ),
        )
    )
    burst_form
    return (burst_form,)


@app.cell
def _(app_burst, app_logic, mo, plt):
    def burst_view(burst):
        """The burst as it stands: a sentence, every request's thresholds per step next to
        its steps alone and in the burst, the table (admitted, or refused and why) and the
        refusals' reasons in full."""
        _n = len(burst.entries)
        _colours = plt.get_cmap("tab20" if _n > 10 else "tab10")
        _colour = lambda e: _colours(e.index % _colours.N)  # noqa: E731
        _fig, (_a1, _a2) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [3, 2]})
        _longest = 1
        for _e in burst.entries:
            if _e.reply is not None and _e.reply.thresholds:
                _t = _e.reply.thresholds
                _longest = max(_longest, len(_t))
                _a1.step(
                    range(1, len(_t) + 1),
                    _t,
                    where="mid",
                    marker="o",
                    markersize=3,
                    color=_colour(_e),
                    alpha=0.9 if _e.lowered else 0.35,
                    linewidth=2 if _e.lowered else 1,
                    label=f"#{_e.index + 1}" if _e.lowered else None,
                )
        _xlim, _ticks = app_logic.step_axis(_longest)
        _a1.set(
            xlabel="denoising step",
            ylabel="threshold",
            ylim=(0.4, 1.0),
            xlim=_xlim,
            xticks=_ticks,
            title="threshold of each step (bold: lowered by the controller)",
        )
        if any(_e.lowered for _e in burst.entries):
            # beside the panel, never over its lines
            _a1.legend(title="request", fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        _a1.grid(alpha=0.3)
        _x = [_e.index + 1 for _e in burst.entries]
        _a2.bar([x - 0.2 for x in _x], [_e.alone.steps for _e in burst.entries], 0.4, color="lightgrey", label="alone")
        _done = [_e for _e in burst.entries if _e.reply is not None]
        _a2.bar(
            [_e.index + 1 + 0.2 for _e in _done],
            [_e.reply.steps for _e in _done],
            0.4,
            color=[_colour(_e) for _e in _done],
            label="in the burst",
        )
        for _e in burst.entries:
            if _e.outcome == "refused":
                _a2.text(_e.index + 1 + 0.2, 0.3, "refused", rotation=90, ha="center", va="bottom", fontsize=7)
        _a2.set(xlabel="request", ylabel="denoising steps", xticks=_x, title="steps alone and in the burst")
        _a2.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.1), ncol=2, frameon=False)
        _fig.tight_layout()
        _rows = app_burst.burst_rows(burst)
        _refused = [
            f"- **#{_e.index + 1}** (SLO {_e.slo_ms:.0f} ms): {_e.reason}"
            for _e in burst.entries
            if _e.outcome == "refused"
        ]
        return mo.vstack(
            [
                mo.md(app_burst.burst_summary(burst)),
                _fig,
                mo.md(app_burst.burst_table(_rows)),
                mo.md("**Refused, in the server's words:**\n\n" + "\n".join(_refused)) if _refused else mo.md(""),
            ]
        )

    return (burst_view,)


@app.cell
def _(app_burst, app_logic, burst_form, burst_outbox, burst_view, client, mo, server):
    burst_form  # a submission re-runs this cell; the form's on_change has queued it
    _request = burst_outbox.take()
    if _request is not None and server is None:
        mo.output.replace(mo.callout(mo.md(app_logic.NOT_STARTED), kind="warn"))
    elif _request is not None:
        _send = lambda url, r: client.complete(  # noqa: E731
            url, r.prompt, max_tokens=r.max_tokens, slo_ms=r.slo_ms, priority=r.priority, min_threshold=r.min_threshold
        )
        mo.output.replace(mo.md(f"_Sending each of the {_request.n} prompts alone first, to measure them..._"))
        _burst = None
        try:
            for _burst in app_burst.run_burst(server.url, _request, _send):
                mo.output.replace(burst_view(_burst))  # live: each answer or refusal as it comes back
        except Exception as e:  # the server stopped mid-burst, or refused a prompt sent alone
            mo.output.replace(mo.callout(mo.md(f"**The burst did not run:** {e}"), kind="danger"))
        else:
            burst_outbox.record(_burst)
            print(f"burst: {app_burst.burst_summary(_burst)}", flush=True)
            for _row in app_burst.burst_rows(_burst):
                print(f"burst request {_row}", flush=True)
    elif burst_outbox.last is not None:
        mo.output.replace(burst_view(burst_outbox.last))
    else:
        mo.output.replace(mo.md("_Send a burst to see the controller at work._"))
    return


if __name__ == "__main__":
    app.run()
