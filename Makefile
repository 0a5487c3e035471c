# One entry point for people and CI: `make test` installs what it needs and runs every tier.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
# Two workers for the unit and integration tiers: alone they keep one core of two busy (they
# wait on subprocesses, sockets and sleeps). Files stay whole on one worker, and files that
# share state beyond their process are grouped (tests/conftest.py, XDIST_GROUPS).
XDIST := -n 2 --dist loadfile
# Debian 13 has apptainer in sid; on Debian 12 it runs from a cached Debian 13 root filesystem.
APPTAINER := $(shell command -v apptainer >/dev/null 2>&1 && echo apptainer || echo debian13-rootfs)

.PHONY: setup system-packages lint test test-unit test-integration test-lab test-lab-long demo demo-down clean

setup: system-packages $(STAMP)

system-packages:
	@bash .ci/system-packages

# pip's own byte-compiling took most of this step, one file at a time, and most of it on the
# 15,000 modules of the Ansible collections, which run on nodes and are never imported here.
# Everything else is compiled on both cores; a file that does not compile (torch ships a
# Python 3.12 test helper) is compiled on import or fails there as it would anyway.
$(STAMP): pyproject.toml
	@TIMED_TICK_S=30 bash .ci/timed venv -- bash -c '\
	  test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) && \
	  $(BIN)/python -m pip install -q --upgrade pip && \
	  $(BIN)/python -m pip install -q --no-compile -e ".[trainer,heartbeat,test]" && \
	  { $(BIN)/python -m compileall -qq -j 0 -x /ansible_collections/ $(VENV)/lib/python3*/site-packages; \
	    echo "byte-compiled the environment (exit $$? : 1 when some file does not compile)"; }'
	@touch $(STAMP)

lint: setup
	@bash .ci/timed lint -- bash -c '\
	  $(BIN)/ruff check provision plugins tests playbooks $(wildcard benchmarks/*.py) && \
	  $(BIN)/ruff format --check provision plugins tests playbooks $(wildcard benchmarks/*.py) && \
	  $(BIN)/mypy && \
	  $(BIN)/python -c "from pathlib import Path; from nodeprep import paths; paths.link_collection(Path(\".ansible/collections\").resolve())" && \
	  MYPYPATH=$(CURDIR)/.ansible/collections $(BIN)/mypy --namespace-packages --explicit-package-bases \
	    -p ansible_collections.nodeprep.hardening.plugins && \
	  $(BIN)/python tests/lint/import_boundary.py provision/nodeprep && \
	  ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.ansible/collections PATH=$(CURDIR)/$(BIN):$$PATH \
	    $(BIN)/ansible-lint --profile production --offline playbooks roles'

test-unit: setup
	@bash .ci/timed unit -- $(PYTEST) $(XDIST) --durations=15 tests/unit

test-integration: setup
	@bash .ci/timed integration -- $(PYTEST) $(XDIST) --durations=30 tests/integration

test-lab: setup
	@bash .ci/timed lab -- $(PYTEST) --durations=20 -m "not lab_long" tests/lab

# Lab stories longer than the CI budget allows (the two-node job: about half an hour here;
# the interconnect check between two nodes: about 14 minutes; volume_grow's role end to end).
test-lab-long: setup
	@bash .ci/timed lab-long -- $(PYTEST) --durations=20 -m lab_long tests/lab

# The trainer image and the lab image build in the background from the start (.ci/prefetch):
# niced, they take what lint and the unit tier leave; the tiers that need the images wait for them.
test: setup
	@bash .ci/prefetch start
	@$(MAKE) --no-print-directory lint test-unit test-integration test-lab; rc=$$?; \
	  bash .ci/prefetch finish; exit $$rc

# The main job on the embedded default target: a lab VM (kept running; `make demo-down` ends it),
# provisioned, the trainer image built and put on it, then proven by verify's report.
DEMO_CACHE := $(HOME)/.cache/nodeprep/demo
# A lab started here has its data disk grown (1 -> 2 GiB) so volume_grow has work to do; the
# lab inventory tells every role what a node has (bond NICs and peer, data disk, checkpoints).
demo: setup
	@$(BIN)/nodeprep lab status >/dev/null 2>&1 || { $(BIN)/nodeprep lab up && \
	  $(BIN)/nodeprep lab fault node1 disk-grow 2G; }
	@bash .ci/subids
	@set -e; mkdir -p $(DEMO_CACHE); \
	  inventory="$$($(BIN)/nodeprep lab inventory --output .lab-inventory.ini)"; \
	  torch="torch==$$($(BIN)/python -c 'import importlib.metadata as m; print(m.version("torch"))')"; \
	  $(BIN)/python -m pip download --progress-bar off -d $(DEMO_CACHE)/wheels "$$torch"; \
	  $(BIN)/nodeprep build-image --apptainer $(APPTAINER) --wheelhouse $(DEMO_CACHE)/wheels \
	    --torch "$$torch" --output $(DEMO_CACHE)/nodeprep-trainer.sif; \
	  vars="$$($(BIN)/nodeprep lab apptainer-vars $(DEMO_CACHE)/nodeprep-trainer.sif \
	    --output .lab-apptainer.json)"; \
	  $(BIN)/nodeprep provision "$$inventory" -e @"$$vars"; \
	  $(BIN)/nodeprep verify "$$inventory"

demo-down: setup
	@$(BIN)/nodeprep lab down

clean:
	rm -rf $(VENV) build dist
