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
# Bytecode goes to the user's cache, not beside the sources. Some machines (this project's CI) set
# PYTHONDONTWRITEBYTECODE, and then every process of a run (a notebook's kernel, a test worker, each rank of chapter
# 15) compiles torch's Python source again on import: about 9 s for torch and the package against 3.5 s from the
# cache. With a prefix the venv is left untouched; an empty PYTHONDONTWRITEBYTECODE counts as unset.
export PYTHONPYCACHEPREFIX ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tutorial_lib/pycache
export PYTHONDONTWRITEBYTECODE :=

# Another CPU, emulated on this one (CONTRIBUTING.md, "Any CPU"): every stage of `make test` then runs as it would there.
# CPU_ISA=avx2: the kernels an AVX2-only x86-64 CPU runs (an older AMD EPYC, most laptops before 2020): ATen's, oneDNN's
# and MKL's dispatch capped at AVX2, no AVX-512, no native bfloat16. Chapter 00 prints what each back end runs.
# CPU_CORES=N: every command pinned to the first N cores (taskset), e.g. CPU_CORES=1 with two notebook workers: half the speed.
ifeq ($(CPU_ISA),avx2)
export ATEN_CPU_CAPABILITY := avx2
export ONEDNN_MAX_CPU_ISA := AVX2
export MKL_ENABLE_INSTRUCTIONS := AVX2
else ifneq ($(CPU_ISA),)
$(error CPU_ISA must be avx2 or empty, got '$(CPU_ISA)')
endif
PIN := $(if $(CPU_CORES),taskset -c 0-$(shell echo $$(($(CPU_CORES) - 1))))

.PHONY: venv machine lab book book-assets colab-wheels test test-unit test-notebooks test-book test-browser screenshots execute clean exercises

# The pinned packages go in with uv where one of pip's find-links folders holds a CPU build of the pinned torch (this
# project's machines keep one on disk): uv reads no pip configuration, so it is handed that folder. It installs the
# same versions as pip (compared with pip freeze) in about 8 s instead of 77 s. Without such a wheel pip installs them:
# uv would take torch's several-GB CUDA build from PyPI.
TORCH_PIN := $(shell sed -n 's/^torch==//p' requirements.txt)
FIND_LINKS := $(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null) $(PIP_FIND_LINKS)
LOCAL_TORCH := $(firstword $(foreach dir,$(FIND_LINKS),$(wildcard $(dir)/torch-$(TORCH_PIN)+cpu-*.whl)))
UV_VERSION := 0.13.9
INSTALL = $(if $(LOCAL_TORCH),$(VENV)/bin/uv pip install -q --python $(PY) --find-links $(dir $(LOCAL_TORCH)),$(PY) -m pip install -q)

$(STAMP): requirements.txt pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip $(if $(LOCAL_TORCH),uv==$(UV_VERSION))
	$(INSTALL) -r requirements.txt
	$(INSTALL) --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

venv: $(STAMP)

# JupyterLab (and nbconvert) for working through the notebooks: pinned in requirements-lab.txt, installed into .venv
# with requirements.txt as constraints (the pinned kernel and notebook packages stay), on first use only.
LAB_STAMP := $(VENV)/.lab-installed
$(LAB_STAMP): $(STAMP) requirements-lab.txt
	$(INSTALL) -r requirements-lab.txt -c requirements.txt
	touch $@

## lab: open JupyterLab on exercises/ (the chapters are one folder up in its file browser)
lab: $(LAB_STAMP)
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --ServerApp.default_url=/lab/tree/exercises \
		$(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

# `time` before a stage's command: each stage of make test prints how long it took (the CI log's split).
TIMED = TIMEFORMAT='$@: %0R s'; time

## book: build the Jupyter Book from the notebooks' stored outputs (no execution), warnings are errors
book: venv book-assets
	$(VENV)/bin/jupyter-book build . -W -n --keep-going

# The JavaScript the book serves itself (MathJax 3, RequireJS, the widget manager), from npm at pinned versions, into
# .book-assets/ (git-ignored); tools/book_extension.py copies it into _build/html/_vendor/. Quiet when up to date.
book-assets:
	$(PY) tools/book_assets.py

## machine: the time of a small GPT update and the float32 matmul throughput (2 threads, then 1), the kernels PyTorch runs
machine: venv
	$(PIN) $(PY) -m tutorial_lib.machine_speed 2
	$(PIN) $(PY) -m tutorial_lib.machine_speed 1

## test: every test of the project: unit tests, the notebooks' stored outputs (nbval), the book, the book in a browser
test: venv test-unit test-notebooks test-book test-browser

# Unit tests in two worker processes (the CI machine's two cores; each test runs on one thread, see tests/conftest.py).
# --dist worksteal: a worker that runs out of tests takes some of the other's, so that a few long tests (the grader's
# kernels) at the end of one worker's share do not leave the other core idle (181 s instead of 220 s here).
UNIT_WORKERS ?= 2

test-unit: venv colab-wheels
	$(TIMED) $(PIN) $(PY) -m pytest -p tools.time_report -n $(UNIT_WORKERS) --dist worksteal tests

# The wheels the offline Colab test (tests/test_colab_install.py) lets pip install from: the package's dependencies
# without torch, at requirements.txt's versions, into .venv/colab-wheels (downloaded once).
colab-wheels: venv
	$(PY) tools/colab_wheelhouse.py

# Notebook kernels: CPU outputs (the stored ones) and the inline backend (the agg exported above shows no figure).
# One thread per kernel, as tools/execute_notebooks.py: the thread count decides how matmuls split their sums, so it
# is pinned; two kernels of one thread each keep both cores busy where one kernel of two threads idles one core in
# every step that is not a large matmul (plots, Python, kernel start-up).
# Each run records the predictions its kernels make afresh (tutorial_lib.checks.prediction), as a fresh clone would.
NOTEBOOK_ENV := TUTORIAL_LIB_DEVICE=cpu MPLBACKEND=module://matplotlib_inline.backend_inline HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 \
	TUTORIAL_LIB_PREDICTIONS=$$(mktemp -d)/predictions.json

## execute: run every notebook top to bottom in a fresh kernel and store its outputs and widget state in place
execute: venv
	$(PY) tools/execute_notebooks.py

# NOTEBOOKS: what test-notebooks runs (folders or files), e.g. `make test-notebooks NOTEBOOKS="chapters/04_multi_head_attention.ipynb"`.
# By default every notebook, the chapters that train first, longest first, and each chapter that trains a shared model
# before the chapters that read it: chapter 09 trains the character GPT (and saves it where the recipe looks) before
# 04, 06 and 10 load it, chapter 11 trains the table's runs that 05, 06 and 13 read. The rest follow in the book's order.
TRAINING_CHAPTERS := $(addprefix chapters/,09_training_a_tiny_gpt.ipynb 07_encoder_decoder_transformer.ipynb \
	12_modern_variants.ipynb 11_what_if_we_remove_it.ipynb 14_encoder_only_bert.ipynb \
	06_residuals_and_normalization.ipynb 13_efficient_attention.ipynb 05_feed_forward.ipynb 15_data_parallel.ipynb \
	04_multi_head_attention.ipynb)
NOTEBOOKS ?= $(TRAINING_CHAPTERS) $(filter-out $(TRAINING_CHAPTERS),$(sort $(wildcard chapters/*.ipynb))) \
	$(sort $(wildcard solutions/*.ipynb)) $(sort $(wildcard exercises/*.ipynb))

# nbval in strict mode: every cell's fresh output must equal the stored one (sanitized by nbval_sanitize.cfg).
# `-o addopts=` drops the unit suite's options (jaxtyping's import hook): the notebooks run in their own kernels.
# NOTEBOOK_WORKERS notebooks run side by side (pytest-xdist; --dist loadfile keeps each notebook's cells in order on
# one worker), handed out in the order of NOTEBOOKS (--no-loadscope-reorder), each worker taking the next when it is
# nearly done, so that both stay busy to the end; a chapter that asks for a model another one is training waits and
# loads it (the recipes' cache lock), and one that finds no model trains it itself: the order changes times, never
# results. --durations lists the slowest cells: none may need more than a quarter of the cell timeout.
NOTEBOOK_WORKERS ?= 2

test-notebooks: venv
	$(TIMED) $(NOTEBOOK_ENV) $(PIN) $(PY) -m pytest -o addopts= -p no:cacheprovider -p tools.time_report -n $(NOTEBOOK_WORKERS) --dist loadfile \
		--no-loadscope-reorder \
		--nbval --nbval-current-env --nbval-sanitize-with nbval_sanitize.cfg --nbval-cell-timeout=600 \
		--timeout=900 --durations=15 $(NOTEBOOKS)

# The book from scratch (--all: a warning in an unchanged page must still fail), warnings as errors.
test-book: venv book-assets
	$(TIMED) $(PIN) $(VENV)/bin/jupyter-book build . --all -W -n --keep-going

# The built book in Chromium (Debian's `chromium`; .ci/run installs it): every page at 1280 and 390 px, offline; and
# `make lab`'s JupyterLab (installed here on first use) running an exercises notebook, its solutions and chapter 03's widget.
test-browser: venv $(LAB_STAMP)
	$(TIMED) $(PIN) $(PY) -m pytest -m browser tests/test_book_browser.py tests/test_jupyterlab.py

## screenshots: the README's pictures of chapter 03 at desktop and phone width, taken by the browser suite
screenshots: book
	BOOK_PAGES=chapters/03_scaled_dot_product_attention BOOK_SCREENSHOTS=docs/screenshots \
		$(PY) -m pytest -q -m browser tests/test_book_browser.py

## exercises: regenerate exercises/ from solutions/ and execute the notebooks whose sources changed
exercises: venv
	$(PY) tools/make_exercises.py

clean:
	rm -rf _build
