"""``python -m pipelines dev|materialize [--law LAW] [ASSET ...]``: the Dagster CLI with the repo's instance.

Sets ``DAGSTER_HOME`` to ``data/dagster_home`` (git-ignored, kept between runs) unless it is
already set, then runs ``dagster dev`` or ``dagster asset materialize`` on
``pipelines.definitions``. Without assets, ``materialize`` builds the whole graph; with
assets it builds them and everything upstream (``*name``: every ancestor, so a fresh
Dagster home needs nothing built before). ``dev`` stops, webserver and daemon included,
within seconds of SIGTERM or SIGINT, also when it was started in the background.

``--law LAW`` (a law with a checkpoint of its own, ``dilaserve.artifacts.LAW_CHECKPOINTS``,
e.g. ``embedded-bd``) is a configured run of the same assets: the model resource points at
the law's checkpoint and the artifact root at its folder (``data/artifacts/laws/LAW/``),
and it builds the model's assets (:data:`LAW_ASSETS`: rollouts, step table, predictor, step
dynamics, threshold quality, measured profile) unless assets are named. It keeps its own
Dagster home (``data/dagster_home/laws/LAW``), so the stored outputs of one asset key never
mix two models. It is opt-in: ``make artifacts`` builds the embedded model's graph alone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DAGSTER_HOME = REPO_ROOT / "data" / "dagster_home"
#: What a configured run for another checkpoint builds (with everything upstream).
LAW_ASSETS = ("step_predictor", "step_dynamics", "threshold_quality", "measured_profile")


def _law(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--law NAME`` taken out of ``argv``."""
    if "--law" not in argv:
        return None, argv
    i = argv.index("--law")
    if i + 1 >= len(argv):
        raise SystemExit("--law needs a name, e.g. --law embedded-bd")
    return argv[i + 1], argv[:i] + argv[i + 2 :]


def law_run_config(law: str) -> dict:
    """The run config of a configured run for ``law``: its checkpoint and artifact folder."""
    from dilaserve.artifacts import LAW_CHECKPOINTS, law_root

    if law not in LAW_CHECKPOINTS:
        raise SystemExit(
            f"--law {law!r} has no checkpoint of its own: use one of {sorted(LAW_CHECKPOINTS)} "
            "(the published law is built by the default graph)"
        )
    checkpoint = REPO_ROOT / LAW_CHECKPOINTS[law]
    root = law_root(law)
    root = root if root.is_absolute() else REPO_ROOT / root
    return {
        "resources": {
            "model": {"config": {"checkpoint": str(checkpoint)}},
            "artifacts": {"config": {"root": str(root)}},
        }
    }


def asset_names() -> set[str]:
    """Every asset the definitions build (what ``materialize ASSET ...`` may name)."""
    from pipelines.definitions import defs

    return {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}


def command(argv: list[str]) -> list[str]:
    law, argv = _law(argv)
    if not argv or argv[0] not in ("dev", "materialize"):
        raise SystemExit(__doc__)
    if argv[0] == "dev":
        if law:
            raise SystemExit("--law applies to materialize only")
        return ["dev", "-w", str(REPO_ROOT / "workspace.yaml"), *argv[1:]]
    if {"-h", "--help"} & set(argv[1:]):
        raise SystemExit(__doc__)
    known = asset_names() if argv[1:] else set()  # resolving the graph is not free: once, and only if needed
    unknown = [a for a in argv[1:] if a not in known]
    if unknown:
        raise SystemExit(
            f"materialize: no asset named {', '.join(map(repr, unknown))}; name some of "
            f"{', '.join(sorted(known))}, or none to build the whole graph"
        )
    assets = argv[1:] or (list(LAW_ASSETS) if law else [])
    select = ",".join(f"*{a}" for a in assets) or "*"
    out = ["asset", "materialize", "-m", "pipelines.definitions", "--select", select]
    return out + (["--config-json", json.dumps(law_run_config(law))] if law else [])


def dagster_home(argv: list[str]) -> Path:
    """The instance folder: ``$DAGSTER_HOME``, else the repo's (a law's own under ``laws/``)."""
    law, _ = _law(argv)
    default = DAGSTER_HOME / "laws" / law if law else DAGSTER_HOME
    return Path(os.environ.get("DAGSTER_HOME") or default)


# ``dagster dev`` is superseded (not deprecated) by ``dg dev``, which lives in the separate
# dagster-dg-cli package and expects a dg project (a ``[tool.dg]`` table, definitions found
# by folder convention). This pipeline is one explicit definitions module and a
# workspace.yaml, which ``dagster dev`` serves as it always has; its notice is silenced.
SUPERSEDED_NOTICE = "ignore:Function `dev_command` is superseded"


def interpreter_flags(argv: list[str]) -> list[str]:
    return ["-W", SUPERSEDED_NOTICE] if argv and argv[0] == "dev" else []


#: Seconds ``dev`` gives dagster to stop after SIGTERM or SIGINT before it kills what is left.
STOP_GRACE_S = 7.0


def supervise(cmd: list[str], grace_s: float = STOP_GRACE_S) -> int:
    """Run ``dagster dev`` in a process group of its own and stop all of it on SIGTERM or SIGINT.

    Started with ``&``, a shell's job has SIGINT ignored, and ``dagster dev`` gives SIGTERM
    whatever SIGINT has: run directly it would ignore both and hold its webserver until
    SIGKILL. Here both signals are caught (a caught signal is the default again in the child),
    passed on as SIGINT (Ctrl-C, which dagster handles by shutting its services down) to the
    whole group, and whatever is still running after ``grace_s`` is killed, the code server
    it leaves behind included. Returns dagster's exit status (0 when it stopped as asked).
    """
    proc = subprocess.Popen(cmd, start_new_session=True)
    asked: list[int] = []

    def _stop(signum, _frame):
        asked.append(signum)
        _signal_group(proc.pid, signal.SIGINT)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    while proc.poll() is None:
        if asked:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
            break
        time.sleep(0.2)
    # Anything of the group that outlived dagster dev (its code server) goes with it.
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 1.5
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    _signal_group(proc.pid, signal.SIGKILL)
    return 0 if asked and proc.returncode in (0, -signal.SIGINT, -signal.SIGKILL) else proc.returncode


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


#: The instance settings ``python -m pipelines`` starts a Dagster home with: default storage in
#: the folder, no telemetry, and no "Join the community" pop-up over the first page a local
#: user opens (the UI's onboarding, "nux").
INSTANCE_SETTINGS = "telemetry:\n  enabled: false\nnux:\n  enabled: false\n"


def write_instance_settings(home: Path) -> None:
    """Write :data:`INSTANCE_SETTINGS` to ``home/dagster.yaml`` when it is missing or empty (a
    file someone wrote is theirs, and is left as it is)."""
    path = home / "dagster.yaml"
    if not path.exists() or not path.read_text().strip():
        path.write_text(INSTANCE_SETTINGS)


def main(argv: list[str]) -> None:
    args = command(argv)
    home = dagster_home(argv)
    os.environ["DAGSTER_HOME"] = str(home)
    home.mkdir(parents=True, exist_ok=True)
    write_instance_settings(home)
    os.chdir(REPO_ROOT)
    cmd = [sys.executable, *interpreter_flags(argv), "-m", "dagster", *args]
    if args[0] == "dev":
        raise SystemExit(supervise(cmd))
    os.execv(sys.executable, cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
