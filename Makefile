# The two commands of the README: `make book` and `make test`. Each sets itself up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TUTORIAL_LIB_DATA ?= $(abspath ../shared/data)
export MPLBACKEND := agg
export OMP_NUM_THREADS ?= 2
export PYDEVD_DISABLE_FILE_VALIDATION := 1

.PHONY: venv book test test-unit clean

$(STAMP): requirements.txt pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

venv: $(STAMP)

## book: build the Jupyter Book from the notebooks' stored outputs (no execution), warnings are errors
book: venv
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

## test: every test of the project
test: venv test-unit

test-unit: venv
	$(PY) -m pytest tests

clean:
	rm -rf _build
