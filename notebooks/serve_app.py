import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="DiLaServe: serving app")


@app.cell
def _():
    import os
    import weakref

    import marimo as mo
    import matplotlib.pyplot as plt

    from dilaserve.schedule.policies import policies
    from dilaserve.serve import client, launcher
    return client, launcher, mo, os, plt, policies, weakref


@app.cell
def _(mo):
    mo.md("""
    # DiLaServe serving app

    Start the serving runtime (`python -m dilaserve.serve`: a local Ray cluster and two CPU
    instances of the embedded model; about 20 s to become healthy), watch its live
    `/metrics`, and send prompts with an SLO. Each answer shows the denoising steps the
    request took and the threshold of every step.

    Open it with `marimo run notebooks/serve_app.py`. Headless:
    `python notebooks/serve_app.py --start --prompt="list : c a f b"` starts the server,
    sends the prompt, prints the answer and stops the server on exit.
    """)
    return


@app.cell
def _(mo, os):
    # Command-line options, so the app also runs headless (tests, scripts):
    #   --start                    start the server on load
    #   --prompt=TEXT              send TEXT once the server is up
    #   --artifacts=DIR            pipeline artifacts the server loads (predictor, profiles)
    #   --reconfig-interval-s=N    seconds between reconfiguration ticks (0: off)
    args = mo.cli_args()
    autostart = "start" in args
    headless_prompt = args.get("prompt")
    artifacts_dir = str(args.get("artifacts") or os.environ.get("DILASERVE_ARTIFACTS") or "data/artifacts")
    default_reconfig_s = float(args.get("reconfig-interval-s", 60))
    return artifacts_dir, autostart, default_reconfig_s, headless_prompt


@app.cell
def _(autostart, default_reconfig_s, mo, policies):
    # The oracle needs the true remaining steps, which only the simulator knows.
    policy = mo.ui.dropdown([n for n in policies.names() if n != "oracle"], value="dilaserve", label="policy")
    reconfig_s = mo.ui.number(start=0, stop=3600, step=10, value=default_reconfig_s,
                              label="reconfiguration interval (s, 0 = off)")
    # Each click flips the value: True starts the server, False stops it.
    toggle = mo.ui.button(value=autostart, on_click=lambda running: not running,
                          label="start / stop the server", kind="success")
    mo.hstack([policy, reconfig_s, toggle], justify="start")
    return policy, reconfig_s, toggle


@app.cell
def _(artifacts_dir, launcher, mo, policy, reconfig_s, toggle, weakref):
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
        with mo.status.spinner(title="Starting the server: Ray cluster and two CPU instances (about 20 s)"):
            try:
                server = launcher.start_server(artifacts=artifacts_dir, extra_args=flags)
            except RuntimeError as e:
                start_error = str(e)
        if server is not None:
            # daemon: a headless run exits without waiting; the handle's finalizer then stops the server
            mo.Thread(target=_stop_when_invalidated, args=(weakref.ref(server),), daemon=True).start()
            print(f"server pid {server.pid} healthy at {server.url}", flush=True)
    return server, start_error


@app.cell
def _(mo, server, start_error):
    if start_error:
        print(start_error, flush=True)
        _status = mo.callout(mo.md(f"**The server did not start.**\n\n```\n{start_error}\n```"), kind="danger")
    elif server is None:
        _status = mo.callout(mo.md("The server is stopped: click **start / stop the server**."), kind="neutral")
    else:
        _status = mo.callout(mo.md(f"Serving at `{server.url}` (pid {server.pid}); log: `{server.log_path}`"),
                             kind="success")
    _status
    return


@app.cell
def _(mo):
    refresh = mo.ui.refresh(options=["1s", "2s", "5s", "10s"], default_interval="2s", label="metrics refresh")
    refresh
    return (refresh,)


@app.cell
def _(client, mo, refresh, server):
    refresh  # re-scrape on every tick
    mo.stop(server is None, mo.md("_No metrics: the server is not running._"))
    try:
        metrics = client.fetch_metrics(server.url)
        print(f"metrics: {len(metrics)} dilaserve samples", flush=True)
    except Exception as e:  # the server may be shutting down between two ticks
        metrics = {}
        print(f"metrics unavailable: {e}")
    _get = lambda name: metrics.get(name, 0.0)  # noqa: E731
    _cards = mo.hstack([
        mo.stat(f"{_get('dilaserve:num_requests_running'):.0f}", label="running"),
        mo.stat(f"{_get('dilaserve:num_requests_waiting'):.0f}", label="waiting"),
        mo.stat(f"{_get('dilaserve:slo_met_total'):.0f}", label="met their SLO"),
        mo.stat(f"{100 * _get('dilaserve:slo_attainment'):.0f}%", label="SLO attainment"),
        mo.stat(f"{_get('dilaserve:migrations_total'):.0f}", label="migrations"),
    ], justify="start")
    # Histogram buckets would drown the table; keep counters, gauges and sums.
    _rows = [{"metric": k, "value": v} for k, v in sorted(metrics.items()) if "_bucket" not in k]
    mo.vstack([_cards, mo.ui.table(_rows, selection=None, page_size=12, label="live /metrics")])
    return


@app.cell
def _(mo):
    form = mo.md("""
    **Send a prompt**

    {prompt}

    {slo_ms} {max_tokens} {min_threshold} {priority}
    """).batch(
        prompt=mo.ui.text_area(value="list : c a f b", full_width=True),
        slo_ms=mo.ui.number(start=100, stop=600_000, step=100, value=20_000, label="SLO (ms)"),
        max_tokens=mo.ui.number(start=1, stop=512, step=1, value=32, label="max tokens"),
        min_threshold=mo.ui.slider(0.0, 1.0, step=0.05, value=0.0, label="quality floor (min threshold)"),
        priority=mo.ui.number(start=-100, stop=100, step=1, value=0, label="priority"),
    ).form(submit_button_label="Send")
    form
    return (form,)


@app.cell
def _(client, form, headless_prompt, mo, server):
    # The form's value (interactive) or --prompt (headless), with the form's defaults.
    request = form.value or ({"prompt": str(headless_prompt), "slo_ms": 20_000, "max_tokens": 32,
                              "min_threshold": 0.0, "priority": 0} if headless_prompt else None)
    mo.stop(request is None, mo.md("_Submit the form to send a prompt._"))
    mo.stop(server is None, mo.callout(mo.md("Start the server first."), kind="warn"))
    reply, reply_error = None, None
    try:
        reply = client.complete(server.url, request["prompt"], max_tokens=request["max_tokens"],
                                     slo_ms=request["slo_ms"], priority=request["priority"],
                                     min_threshold=request["min_threshold"])
        print(f"answer: {reply.text!r} steps: {reply.steps} thresholds: {reply.thresholds} "
              f"latency_ms: {reply.latency_ms} slo_met: {reply.slo_met}", flush=True)
    except Exception as e:  # HTTP errors and refused requests are shown, not raised
        reply_error = str(e)
        print(f"request failed: {reply_error}", flush=True)
    return reply, reply_error


@app.cell
def _(mo, plt, reply, reply_error):
    mo.stop(reply_error is not None, mo.callout(mo.md(f"**Request failed:** {reply_error}"), kind="danger"))
    mo.stop(reply is None)
    _fig, _ax = plt.subplots(figsize=(6, 2.2))
    _ax.step(range(1, len(reply.thresholds) + 1), reply.thresholds, where="mid", marker="o")
    _ax.set(xlabel="denoising step", ylabel="threshold", ylim=(0, 1.05), title="threshold of each step")
    _ax.grid(alpha=0.3)
    _fig.tight_layout()
    mo.vstack([
        mo.md(f"**Answer:** `{reply.text}`"),
        mo.hstack([
            mo.stat(str(reply.steps), label="steps"),
            mo.stat(f"{reply.latency_ms:.0f} ms", label=f"latency (SLO {reply.slo_ms:.0f} ms)"),
            mo.stat("met" if reply.slo_met else "missed", label="SLO"),
            mo.stat(", ".join(reply.instances) or "-", label="instances"),
        ], justify="start"),
        _fig,
    ])
    return


if __name__ == "__main__":
    app.run()
