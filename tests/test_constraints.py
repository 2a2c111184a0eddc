"""constraints.txt pins what pyproject.toml's ranges allow: every dependency the project
declares has exactly one version there, inside its range, so `make setup` installs the same
packages on every machine and a range change that the pins no longer satisfy fails here,
not as a resolver error in CI."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

tomllib = pytest.importorskip("tomllib")  # the standard library's from Python 3.11

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and version and " " not in line, f"constraints.txt: {line!r} is not NAME==VERSION"
        key = canonicalize_name(name)
        assert key not in pins, f"constraints.txt pins {name} twice"
        pins[key] = version
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        reqs += extra
    return [Requirement(r) for r in reqs]


def test_every_declared_dependency_is_pinned_within_its_range():
    pins = _pins()
    for req in _declared():
        version = pins.get(canonicalize_name(req.name))
        assert version is not None, f"{req.name} is declared in pyproject.toml but not pinned: run make constraints"
        assert req.specifier.contains(version, prereleases=True), (
            f"constraints.txt pins {req.name}=={version}, outside pyproject.toml's {req}: run make constraints"
        )


def test_torch_is_left_to_the_torch_spec():
    # A pin here would fight a GPU host's own CUDA build (make setup TORCH_SPEC=).
    assert "torch" not in _pins()
