# Two commands on a fresh machine:
#   make run    set up (once), build the serving artifacts (once) and serve the embedded default
#               model on 127.0.0.1:8000 (flags: make run SERVE_ARGS="--port 8001 --policy infaas")
#   make test   set up (once), build the pipeline artifacts (once), lint and run the whole test suite
# More:
#   make demo        decode task prompts at a few thresholds and print accuracy / steps
#   make artifacts   materialise the offline pipeline (predictor, profiles, quality, dynamics)
#   make test-unit   lint, then the tests that start no Ray cluster, server, marimo, Dagster run or
#                    gloo worker processes (pytest marker `integration`); under 3 minutes on 2 cores
#   make lint        ruff (lint rules, format check), import-linter (the layers) and vulture (dead code);
#                    configuration in pyproject.toml
#
# GPU hosts install their own CUDA build of torch first and skip ours:
#   make setup TORCH_SPEC=
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
# The CPU build; a bare `torch` would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup run demo artifacts test test-unit lint lint-checks bench clean-venv constraints

# Built once on a fresh checkout (data/artifacts/ is git-ignored); `make artifacts` rebuilds.
ARTIFACTS_STAMP := data/artifacts/.built
# What the server's control plane loads: the tuned step predictor, the measured latency profile,
# the threshold-quality table and the step dynamics. Without them the server falls back to
# one-shot rates and a start-up profile, so the first `make run` builds them (about a minute and
# a half on 2 cores, with the pipeline's progress) rather than serve the fallbacks.
SERVING_STAMP := data/artifacts/.serving
SERVING_ASSETS := step_predictor measured_profile threshold_quality step_dynamics
SERVE_ARGS ?=

# constraints.txt holds the versions pyproject.toml's ranges resolved to when it was written, so
# two machines (and CI) install the same packages and build the same artifacts.
$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(strip $(TORCH_SPEC)),$(PY) -m pip install --quiet "$(TORCH_SPEC)")
	$(PY) -m pip install --quiet -c constraints.txt -e '.[test]'
	touch $@

setup: $(VENV)/.installed

run: setup $(SERVING_STAMP)
	$(PY) -m dilaserve.serve $(SERVE_ARGS)

demo: setup
	$(PY) -m dilaserve.demo

artifacts: setup
	$(PY) -m pipelines materialize
	touch $(ARTIFACTS_STAMP) $(SERVING_STAMP)

$(ARTIFACTS_STAMP): $(VENV)/.installed
	$(PY) -m pipelines materialize
	touch $@ $(SERVING_STAMP)

$(SERVING_STAMP): $(VENV)/.installed
	@echo "first run: building the serving artifacts once ($(SERVING_ASSETS)); progress follows"
	$(PY) -m pipelines materialize $(SERVING_ASSETS)
	touch $@

# The benchmarks' tests run against the pipeline's artifacts, as a user's run would.
# Lint first: it takes seconds and fails before the suite's minutes.
test: setup $(ARTIFACTS_STAMP)
	$(MAKE) --no-print-directory lint-checks
	$(PY) -m pytest -q --durations=15

# The quick tier: everything but the tests marked `integration` (Ray, servers, marimo, Dagster,
# multi-process tensor parallelism).
test-unit: setup $(ARTIFACTS_STAMP)
	$(MAKE) --no-print-directory lint-checks
	$(PY) -m pytest -q -m "not integration" --durations=15

# Read-only: reports what to change; `ruff check --fix` / `ruff format` apply it. The
# import contracts (pyproject.toml, [tool.importlinter]) keep every import pointing down
# the layers of docs/architecture.md section 2; vulture reports code nothing uses
# (vulture_whitelist.py lists the names only a framework reads).
lint: setup
	$(MAKE) --no-print-directory lint-checks

lint-checks:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m vulture

bench: setup
	$(PY) -m dilaserve.bench engine --json

clean-venv:
	rm -rf $(VENV)

# After a change to pyproject.toml's ranges: resolve them afresh in a scratch venv and write the
# versions it installed. The scratch venv gets no torch (TORCH_SPEC installs it); should a
# dependency pull torch in, its pin is dropped so a GPU host's own build is not fought.
CONSTRAINTS_VENV := /tmp/dilaserve-constraints-venv
constraints:
	rm -rf $(CONSTRAINTS_VENV)
	$(PYTHON) -m venv $(CONSTRAINTS_VENV)
	$(CONSTRAINTS_VENV)/bin/pip install --quiet -e '.[test]'
	{ sed -n '/^#/p' constraints.txt; $(CONSTRAINTS_VENV)/bin/pip freeze --exclude-editable \
	  | grep -v -i '^torch=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(CONSTRAINTS_VENV)
