# llmload — the front door.  Every user-facing job is a target.
# `make loadtest` and `make test` work on a fresh machine: they install what they need.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
LLMLOAD := $(VENV)/bin/llmload
STAMP := $(VENV)/.installed

# loadtest knobs (see README)
TARGET ?=
MODEL ?=
ENGINE ?=
USERS ?= 20
SPAWN_RATE ?= 20
PACING ?= 3s
DURATION ?= 60s
# warm-up phase before the measured phases (kept in requests.jsonl, left out of the statistics)
WARMUP ?= 15s
MODES ?= sync,stream
SCENARIO ?= mix
METRICS_PORT ?= 9646
ARGS ?=
PORT ?= 8000

.PHONY: help install system-deps serve loadtest test test-unit test-integration test-gpu lint \
        bench bench-gpu gate ci-gate soak reliability up down dashboards clean capacity

help:
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

install: $(STAMP) ## create .venv with everything: core + server (torch) + ui (gradio) + dev tools (idempotent)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: a looser spec pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

system-deps: ## install prometheus, nginx-light, chromium via apt-get when missing
	bash scripts/system-deps.sh

serve: install ## run the bundled target server (ARGS="--engine synthetic ...")
	$(LLMLOAD) serve --port $(PORT) $(ARGS)

loadtest: install ## sync-vs-stream run; TARGET unset = start the bundled server
	$(LLMLOAD) loadtest --target "$(TARGET)" --model "$(MODEL)" --engine "$(ENGINE)" \
	  --users $(USERS) --spawn-rate $(SPAWN_RATE) --pacing $(PACING) --duration $(DURATION) --warmup $(WARMUP) \
	  --modes $(MODES) --scenario $(SCENARIO) --metrics-port $(METRICS_PORT) $(ARGS)

# capacity search (docs/capacity.md): open loop unless SEARCH=users; a trace's pace:
# SEARCH=speedup ARGS="--dataset trace FILE"
SLO ?= ttft_p95=600ms
BUDGET ?= 10m
SEARCH ?= rate
capacity: install ## highest load within SLO= (ttft_p95=600ms) in BUDGET= (10m); SEARCH=rate|users|speedup; TARGET unset = bundled server
	$(LLMLOAD) capacity --target "$(TARGET)" --model "$(MODEL)" --engine "$(ENGINE)" --$(SEARCH) \
	  --slo "$(SLO)" --budget $(BUDGET) --scenario $(SCENARIO) --metrics-port $(METRICS_PORT) $(ARGS)

# pytest-xdist workers for `make test` (0: one process); see docs/development.md
TEST_WORKERS ?= 3
test: install system-deps lint ## lint, then the full test suite (unit + integration) on TEST_WORKERS= (3) workers
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup tests/unit tests/integration $(ARGS)

test-unit: install ## unit tests only (no sockets)
	$(PY) -m pytest -q tests/unit $(ARGS)

test-integration: install system-deps ## integration tests only (real servers on loopback)
	$(PY) -m pytest -q tests/integration $(ARGS)

test-gpu: install ## opt-in GPU tests (needs CUDA)
	$(PY) -m pytest -q tests/gpu $(ARGS)

lint: install ## ruff (lint + format check) + mypy
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) scripts/typecheck.py

bench: install system-deps ## run the benchmarks and rewrite BENCHMARKS.md sections
	$(PY) -m bench $(ARGS)

# A GPU host with its own torch (CUDA) and transformers and no network runs bench.gpu on
# $(PYTHON) itself: no make install there (its torch pin and venv are for this repo's machines)
ifneq ($(filter bench-gpu,$(MAKECMDGOALS)),)
GPU_HOST := $(shell $(PYTHON) -c 'import torch, transformers; print(int(torch.cuda.is_available()))' 2>/dev/null)
endif
bench-gpu: $(if $(filter 1,$(GPU_HOST)),,install) ## transformers engines at Qwen2.5-7B scale on a CUDA GPU (random bf16 weights); writes BENCHMARKS.md section gpu
	$(if $(filter 1,$(GPU_HOST)),$(PYTHON),$(PY)) -m bench.gpu $(ARGS)

# --- reliability (RELIABILITY.md): every fault and bad input for real; the soak is not part of `make test`
reliability: install system-deps ## every fault, bad input and overload case for real; rewrites RELIABILITY.md (~4 min)
	$(PY) -m bench reliability $(ARGS)

# `make soak` runs 10 minutes unless DURATION is given here (make soak DURATION=2m)
SOAK_DURATION := $(if $(filter command line environment,$(origin DURATION)),$(DURATION),10m)
soak: install ## 10 min at USERS=20 on the embedded model: RSS, threads, tasks, fds of server and load generator -> RELIABILITY.md
	$(PY) -m bench.soak --duration $(SOAK_DURATION) --users $(USERS) $(ARGS)

# --- compose stack and dashboards (see README "Dashboards and the compose stack") ---
COMPOSE := docker compose -f compose/docker-compose.yml
WORKERS ?=
define require_docker
	@docker info >/dev/null 2>&1 || { echo "make $@: no Docker engine reachable ('docker info' failed). \
	Start Docker (with the compose plugin) or point DOCKER_HOST at one; the stack cannot run without it." >&2; exit 1; }
endef

up: ## compose stack: target+nginx, Prometheus, Grafana (127.0.0.1:3000); TARGET=http://host:8000 watches yours; WORKERS=N runs a load test
	$(require_docker)
	@test -n "$$GF_ADMIN_PASSWORD" || { echo "make up: set GF_ADMIN_PASSWORD (Grafana's admin password; there is no admin/admin default)" >&2; exit 1; }
	@set -e; profiles=bundled; \
	if [ -n "$(TARGET)" ]; then \
	  url="$(TARGET)"; scheme="$${url%%://*}"; hostport="$${url#*://}"; hostport="$${hostport%%/*}"; \
	  case "$$hostport" in *:*) ;; *) [ "$$scheme" = https ] && hostport="$$hostport:443" || hostport="$$hostport:80";; esac; \
	  loop='s#^(localhost|127\.0\.0\.1)([:/]|$$)#host.docker.internal\2#'; \
	  export LLMLOAD_UPSTREAM="$$(echo "$$hostport" | sed -E "$$loop")" LLMLOAD_UPSTREAM_SCHEME="$$scheme"; \
	  export LLMLOAD_TARGET="$$scheme://$$(echo "$${url#*://}" | sed -E "$$loop")"; \
	  profiles=external; \
	fi; \
	if [ -n "$(WORKERS)" ]; then profiles="$$profiles,load"; fi; \
	export COMPOSE_PROFILES="$$profiles" WORKERS="$(or $(WORKERS),2)" USERS="$(USERS)" SPAWN_RATE="$(SPAWN_RATE)" \
	  PACING="$(PACING)" DURATION="$(DURATION)" MODES="$(MODES)" SCENARIO="$(SCENARIO)" METRICS_PORT="$(METRICS_PORT)"; \
	$(COMPOSE) up -d --build $(if $(WORKERS),--scale locust-worker=$(WORKERS)); \
	echo "up ($$profiles): Grafana http://127.0.0.1:$${GRAFANA_PORT:-3000} (admin + GF_ADMIN_PASSWORD), Prometheus http://127.0.0.1:$${PROMETHEUS_PORT:-9090}"

down: ## stop the compose stack (volumes kept; ARGS=-v removes them)
	$(require_docker)
	COMPOSE_PROFILES=bundled,external,load GF_ADMIN_PASSWORD="$${GF_ADMIN_PASSWORD:-unused-by-down}" $(COMPOSE) down $(ARGS)

dashboards: install ## regenerate dashboards/json/ from dashboards/*.py and validate it
	$(LLMLOAD) dashboards build
	$(LLMLOAD) dashboards check

# CI gate on TTFT (reports/): RUN= run directory, BASELINE= baseline file
RUN ?=
BASELINE ?=
GATE_ARGS ?=

gate: install ## gate RUN= against BASELINE= on TTFT p95 (exit 0 pass, 1 regression, 2 inconclusive; GATE_ARGS=...)
	@if [ -z "$(RUN)" ] || [ -z "$(BASELINE)" ]; then \
	  echo "usage: make gate RUN=runs/<id> BASELINE=baseline.json [GATE_ARGS='--max-regression 10%']" >&2; exit 2; fi
	$(LLMLOAD) report gate "$(RUN)" --baseline "$(BASELINE)" $(GATE_ARGS)

ci-gate: install ## short run on the bundled synthetic server, gated against reports/baselines/ci-synthetic.json
	$(LLMLOAD) ci-gate $(GATE_ARGS)

clean: ## remove caches (keeps .venv and runs/)
	find . -name __pycache__ -prune -exec rm -rf {} +
	rm -rf .pytest_cache .mypy_cache .ruff_cache
