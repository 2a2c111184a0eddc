# Two commands on a fresh machine:
#   make run    set up (once) and run the main job on the embedded default model
#   make test   set up (once) and run the whole test suite
#
# GPU hosts install their own CUDA build of torch first and skip ours:
#   make setup TORCH_SPEC=
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
# The CPU build; a bare `torch` would pull a multi-GB CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: setup run test bench clean-venv

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(if $(strip $(TORCH_SPEC)),$(PY) -m pip install --quiet "$(TORCH_SPEC)")
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

setup: $(VENV)/.installed

run: setup
	$(PY) -m dilaserve.demo

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) -m dilaserve.bench engine --json

clean-venv:
	rm -rf $(VENV)
