# Two entry points for a newcomer: `make run` (the quickstart job) and `make test`.
# Both create .venv and install the pinned stack first (once; later calls skip it).
# On a 2-core machine (README): `make run` trains for about 3.5 min (up to ~10 when other jobs share
# the cores); `make test` takes about 27 min from a fresh clone with redis-server (2026-12-02; docs/testing.md).
VENV ?= .venv
PY := $(VENV)/bin/python
RECIPE ?= quickstart

.PHONY: setup run test test-fast gpu-dry-run lint bench test-versions constraints setup-vision run-vision

# pip byte-compiles every module it installs (torch's and transformers' thousands: about a minute on 2 cores), most of
# which no run imports; Python compiles what is imported as it is imported, once. Where the environment forbids
# writing byte-code (PYTHONDONTWRITEBYTECODE, which many container images set) every process would compile torch again,
# so pip compiles it all up front there.
NO_COMPILE := $(if $(PYTHONDONTWRITEBYTECODE),,--no-compile)

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet $(NO_COMPILE) -c constraints.txt -e '.[dev]'
	touch $@

run: setup
	$(PY) -m runner +recipe=$(RECIPE) $(ARGS)

lint: setup
	$(PY) -m ruff check runner tests benchmarks examples scripts setup.py
	$(PY) -m mypy runner
	$(VENV)/bin/lint-imports

# Two pytest workers (pytest-xdist), each test file on one worker, the longest files first (tests/conftest.py,
# LONGEST_FIRST): most of the suite's time is subprocesses starting and compiling, which two workers overlap.
PYTEST_WORKERS ?= 2
# gpu_prep (the GPU session's dry run, ~10 min on a new machine, in a venv of its own) is left out: make gpu-dry-run.
test: lint
	WANDB_MODE=offline $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not gpu_prep" \
	  --durations=15 $(PYTEST_ARGS)

# timm's image models (model=timm, docs/vision.md) need a torchvision made for the torch beside it. PyPI's torch and
# torchvision pair up; .venv's local CPU torch has none on PyPI. So `make run-vision` trains in the versions job's venv
# of the newest supported torch (PyPI's, with runner[dev,vision]; installed once, a few GB): RECIPE=resnet_tiny or vit_tiny.
VISION_TORCH ?= 2.15.0
# Where versions.sh puts that venv (its RUNNER_VERSION_VENVS, from the environment, else .venvs).
VISION_VENV = $(or $(RUNNER_VERSION_VENVS),.venvs)/torch-$(VISION_TORCH)
setup-vision:
	.ci/versions.sh --install $(VISION_TORCH)

run-vision: RECIPE = resnet_tiny
# That venv holds no byte-code until a process writes it (versions.sh installs with --no-compile): where the
# environment says not to write it (PYTHONDONTWRITEBYTECODE, set by many container images), every run would compile
# torch from source again, ~12 s.
run-vision: setup-vision
	env -u PYTHONDONTWRITEBYTECODE $(VISION_VENV)/bin/python -m runner +recipe=$(RECIPE) $(ARGS)

# The tier to run while working: every test not marked slow (no process started, nothing compiled with Inductor:
# tests/conftest.py fails a test of this tier that does either), test by test on two workers.
test-fast: setup
	RUNNER_TEST_TIER=fast WANDB_MODE=offline $(PY) -m pytest -q -n $(PYTEST_WORKERS) -m "not slow and not gpu_prep" --durations=10 $(PYTEST_ARGS)

# Before a GPU session (docs/gpu.md): every part of scripts/gpu_session.sh with --quick on the CPU, in a venv holding
# only what the GPU machine has plus the carried wheels (built once, ~/.cache/runner/gpu-venv-py3.12).
gpu-dry-run: setup
	WANDB_MODE=offline $(PY) -m pytest -q -m gpu_prep -s $(PYTEST_ARGS)

bench: setup
	$(PY) benchmarks/compare.py

# The oldest and the newest supported torch from PyPI, each in its own venv under .venvs/ (kept for the
# next run), with a fast subset and the smoke recipe (docs/install.md). CI runs it after `make test`.
test-versions:
	.ci/versions.sh

# constraints.txt from .venv: exactly what runner[dev,tune,trace] installs, nothing installed by hand.
constraints: setup
	$(PY) .ci/constraints.py > constraints.txt
