# llmload — the front door.  Every user-facing job is a target.
# `make loadtest` and `make test` work on a fresh machine: they install what they need.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# loadtest knobs (see README)
TARGET ?=
MODEL ?=
ENGINE ?=
USERS ?= 20
SPAWN_RATE ?= 20
PACING ?= 3s
DURATION ?= 60s
MODES ?= sync,stream
SCENARIO ?= mix
METRICS_PORT ?= 9646
ARGS ?=
PORT ?= 8000

.PHONY: help install system-deps serve loadtest test test-unit test-integration test-gpu lint \
        bench bench-gpu gate ci-gate soak up down dashboards clean

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

install: $(STAMP) ## create .venv and install everything (idempotent)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: a looser spec pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev,ui]'
	touch $(STAMP)

system-deps: ## install prometheus, nginx-light, chromium via apt-get when missing
	bash scripts/system-deps.sh

serve: install ## run the bundled target server (ARGS="--engine synthetic ...")
	$(PY) -m target_server --port $(PORT) $(ARGS)

loadtest: install ## sync-vs-stream run; TARGET unset = start the bundled server
	$(PY) -m loadtests loadtest --target "$(TARGET)" --model "$(MODEL)" --engine "$(ENGINE)" \
	  --users $(USERS) --spawn-rate $(SPAWN_RATE) --pacing $(PACING) --duration $(DURATION) \
	  --modes $(MODES) --scenario $(SCENARIO) --metrics-port $(METRICS_PORT) $(ARGS)

test: install system-deps ## the full test suite (unit + integration)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit tests/integration $(ARGS)

test-unit: install ## unit tests only (no sockets)
	$(PY) -m pytest -q tests/unit $(ARGS)

test-gpu: install ## opt-in GPU tests (needs CUDA)
	$(PY) -m pytest -q tests/gpu $(ARGS)

lint: install ## ruff + mypy
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: install system-deps ## run the benchmarks and rewrite BENCHMARKS.md sections
	$(PY) -m bench $(ARGS)

clean: ## remove caches (keeps .venv and runs/)
	find . -name __pycache__ -prune -exec rm -rf {} +
	rm -rf .pytest_cache .mypy_cache .ruff_cache
