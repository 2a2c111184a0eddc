"""``python -m pipelines dev|materialize [ASSET ...]``: the Dagster CLI with the repo's instance.

Sets ``DAGSTER_HOME`` to ``data/dagster_home`` (git-ignored, kept between runs) unless it is
already set, then runs ``dagster dev`` or ``dagster asset materialize`` on
``pipelines.definitions``. Without assets, ``materialize`` builds the whole graph; with
assets it builds them and everything upstream (``*name``: every ancestor, so a fresh
Dagster home needs nothing built before).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DAGSTER_HOME = REPO_ROOT / "data" / "dagster_home"


def command(argv: list[str]) -> list[str]:
    if not argv or argv[0] not in ("dev", "materialize"):
        raise SystemExit(__doc__)
    if argv[0] == "dev":
        return ["dev", "-w", str(REPO_ROOT / "workspace.yaml"), *argv[1:]]
    select = ",".join(f"*{a}" for a in argv[1:]) or "*"
    return ["asset", "materialize", "-m", "pipelines.definitions", "--select", select]


# ``dagster dev`` is superseded (not deprecated) by ``dg dev``, which lives in the separate
# dagster-dg-cli package and expects a dg project (a ``[tool.dg]`` table, definitions found
# by folder convention). This pipeline is one explicit definitions module and a
# workspace.yaml, which ``dagster dev`` serves as it always has; its notice is silenced.
SUPERSEDED_NOTICE = "ignore:Function `dev_command` is superseded"


def interpreter_flags(argv: list[str]) -> list[str]:
    return ["-W", SUPERSEDED_NOTICE] if argv and argv[0] == "dev" else []


def main(argv: list[str]) -> None:
    args = command(argv)
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(DAGSTER_HOME)))
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").touch()  # an empty file: default storage in this folder, no warning
    os.chdir(REPO_ROOT)
    os.execv(sys.executable, [sys.executable, *interpreter_flags(argv), "-m", "dagster", *args])


if __name__ == "__main__":
    main(sys.argv[1:])
