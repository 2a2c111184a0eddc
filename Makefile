# Two commands on a fresh machine:
#   make run    set up (once) and serve the embedded default model on 127.0.0.1:8000
#   make test   set up (once), build the pipeline artifacts (once) and run the whole test suite
# More:
#   make demo        decode task prompts at a few thresholds and print accuracy / steps
#   make artifacts   materialise the offline pipeline (predictor, profiles, quality, dynamics)
#   make lint        ruff: lint rules and the format check (configuration in pyproject.toml)
#
# GPU hosts install their own CUDA build of torch first and skip ours:
#   make setup TORCH_SPEC=
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
# The CPU build; a bare `torch` would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup run demo artifacts test lint bench clean-venv

# Built once on a fresh checkout (data/artifacts/ is git-ignored); `make artifacts` rebuilds.
ARTIFACTS_STAMP := data/artifacts/.built

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(strip $(TORCH_SPEC)),$(PY) -m pip install --quiet "$(TORCH_SPEC)")
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

run: setup
	$(PY) -m dilaserve.serve

demo: setup
	$(PY) -m dilaserve.demo

artifacts: setup
	$(PY) -m pipelines materialize
	touch $(ARTIFACTS_STAMP)

$(ARTIFACTS_STAMP): $(VENV)/.installed
	$(PY) -m pipelines materialize
	touch $@

# The benchmarks' tests run against the pipeline's artifacts, as a user's run would.
test: setup $(ARTIFACTS_STAMP)
	$(PY) -m pytest -q

# Read-only: reports what to change; `ruff check --fix` / `ruff format` apply it.
lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

bench: setup
	$(PY) -m dilaserve.bench engine --json

clean-venv:
	rm -rf $(VENV)
