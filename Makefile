# One entry point for people and CI: `make test` installs what it needs and runs every tier.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider

.PHONY: setup system-packages lint test test-unit test-integration test-lab demo demo-down clean

setup: system-packages $(STAMP)

system-packages:
	@bash .ci/system-packages

$(STAMP): pyproject.toml
	@bash .ci/timed venv -- bash -c '\
	  test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) && \
	  $(BIN)/python -m pip install -q --upgrade pip && \
	  $(BIN)/python -m pip install -q -e ".[trainer,heartbeat,test]"'
	@touch $(STAMP)

lint: setup
	@bash .ci/timed lint -- bash -c '\
	  $(BIN)/ruff check provision tests playbooks $(wildcard benchmarks/*.py) && \
	  $(BIN)/ruff format --check provision tests playbooks $(wildcard benchmarks/*.py) && \
	  $(BIN)/mypy && \
	  PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/ansible-lint --profile production --offline playbooks roles'

test-unit: setup
	@bash .ci/timed unit -- $(PYTEST) tests/unit

test-integration: setup
	@bash .ci/timed integration -- $(PYTEST) --durations=10 tests/integration

test-lab: setup
	@bash .ci/timed lab -- $(PYTEST) --durations=20 tests/lab

test: lint test-unit test-integration test-lab

# The main job on the embedded default target: a lab VM (kept running; `make demo-down` ends it),
# provisioned, then proven by verify's report.
demo: setup
	@$(BIN)/nodeprep lab status >/dev/null 2>&1 || $(BIN)/nodeprep lab up
	@inventory="$$($(BIN)/nodeprep lab inventory --output .lab-inventory.ini)" && \
	  $(BIN)/nodeprep provision "$$inventory" && \
	  $(BIN)/nodeprep verify "$$inventory"

demo-down: setup
	@$(BIN)/nodeprep lab down

clean:
	rm -rf $(VENV) build dist
