"""Open a Dagster asset page in headless Chromium and check that its plot shows in place.

    python scripts/dagster_screenshot.py                        # step_predictor, data/dagster_home
    python scripts/dagster_screenshot.py --asset measured_profile --out /tmp/page.png
    python scripts/dagster_screenshot.py --home /tmp/some_dagster_home --json

Starts the Dagster webserver on loopback for the instance in ``--home`` (the repo's
``data/dagster_home`` by default, as ``python -m pipelines dev`` uses it), opens the asset's
page at 1400 x 1000 as a new visitor would, waits until the ``plot`` metadata image has
loaded (no click), scrolls it into view and saves a screenshot. Prints what it saw as one
JSON line: whether the plot is shown, its size, whether Dagster's "Join the community"
pop-up covers the page. Exits 1 when the plot is not shown. Needs Chromium (Debian:
``apt-get install -y chromium``); the asset must have been materialised in that instance
(``python -m pipelines materialize step_predictor``).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from websockets.sync.client import connect

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from pipelines.__main__ import DAGSTER_HOME, write_instance_settings  # noqa: E402
from pipelines.metadata import PLOT_FOLDER  # noqa: E402

#: The browser window, as the pages were reviewed.
WINDOW = (1400, 1000)
#: What the page's script reports: every plot image served from the compute-log folder.
FIND_PLOT = f"""
(() => {{
  const imgs = [...document.images].filter(i => i.src.includes('/logs/{PLOT_FOLDER}/'));
  const nux = [...document.querySelectorAll('[role=dialog]')].some(d => /Join the/.test(d.innerText));
  if (imgs.length && imgs[0].complete && imgs[0].naturalWidth > 0) imgs[0].scrollIntoView({{block: 'center'}});
  return JSON.stringify({{
    plots: imgs.map(i => ({{src: i.src, loaded: i.complete && i.naturalWidth > 0,
                          width: Math.round(i.getBoundingClientRect().width),
                          height: Math.round(i.getBoundingClientRect().height)}})),
    nux_dialog: nux,
  }});
}})()
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    raise SystemExit("no Chromium found: install it (Debian: apt-get install -y chromium)")


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args[0]} exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {timeout_s:.0f} s")


class Page:
    """One tab of a headless Chromium, driven over the DevTools protocol."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")


def open_browser(profile: Path) -> tuple[subprocess.Popen, str]:
    """Headless Chromium with a fresh profile (a first visit); returns it and its page's DevTools URL."""
    proc = subprocess.Popen(
        [
            chromium(),
            "--headless=new",
            "--no-sandbox",  # run as root in containers
            "--disable-gpu",
            "--no-first-run",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text().strip():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit("Chromium did not open its DevTools port")
        time.sleep(0.2)
    port = int(port_file.read_text().split()[0])
    targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
    return proc, next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")


def check_page(base_url: str, asset: str, out: Path, timeout_s: float = 90) -> dict:
    """Open ``base_url/assets/ASSET``, wait for its plot (at most ``timeout_s``), screenshot it."""
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        proc, ws_url = open_browser(Path(profile))
        try:
            with connect(ws_url, max_size=64 * 2**20, open_timeout=30) as ws:
                seen = visit(Page(ws), f"{base_url}/assets/{asset}", out, timeout_s)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    shown = [p for p in seen["plots"] if p["loaded"]]
    return {
        "asset": asset,
        "url": f"{base_url}/assets/{asset}",
        "plot_shown": bool(shown),
        "plot_size": [shown[0]["width"], shown[0]["height"]] if shown else None,
        "nux_dialog": seen["nux_dialog"],
        "screenshot": str(out),
    }


def visit(page: Page, url: str, out: Path, timeout_s: float) -> dict:
    """Open ``url``, poll for a loaded plot (at most ``timeout_s``), then screenshot the window."""
    page.call("Page.enable")
    page.call("Page.navigate", url=url)
    deadline = time.monotonic() + timeout_s
    seen = {"plots": [], "nux_dialog": False}
    while time.monotonic() < deadline:
        seen = json.loads(page.evaluate(FIND_PLOT) or "{}") or seen
        if any(p["loaded"] for p in seen["plots"]):
            break
        time.sleep(1.0)
    time.sleep(1.5)  # the pop-up, if any, opens a second after the page
    seen = json.loads(page.evaluate(FIND_PLOT) or "{}") or seen
    shot = page.call("Page.captureScreenshot", format="png")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(base64.b64decode(shot["data"]))
    return seen


def run(home: Path, asset: str, out: Path, timeout_s: float = 240) -> dict:
    """Serve ``home``'s instance with the repo's workspace on a free loopback port and check
    ``asset``'s page; the webserver is stopped on the way out."""
    home.mkdir(parents=True, exist_ok=True)
    write_instance_settings(home)
    port = free_port()
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    server = subprocess.Popen(
        [sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port), "-w", "workspace.yaml"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/server_info", timeout_s, server)
        return check_page(base, asset, out)
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--home", type=Path, default=Path(os.environ.get("DAGSTER_HOME") or DAGSTER_HOME))
    ap.add_argument("--asset", default="step_predictor")
    ap.add_argument("--out", type=Path, default=Path("dagster_step_predictor.png"))
    args = ap.parse_args(argv)
    seen = run(args.home, args.asset, args.out)
    print(json.dumps(seen), flush=True)
    return 0 if seen["plot_shown"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
