# groundlens: two commands do everything on a fresh machine with Python 3.11 and make.
#   make demo   - set up .venv, run the offline LangGraph RAG example, write out/report.html + out/trace.json
#   make test   - set up .venv (and Chromium + a Phoenix server venv for the end-to-end tests), lint, build the docs, run every test

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.groundlens-installed
PYTEST_ARGS ?=
# the labelled data sets the benchmarks and quality tests read (a folder beside the checkout); the
# product itself never looks outside its package for them
GROUNDLENS_SHARED_DATA ?= $(abspath ../shared/data)
export GROUNDLENS_SHARED_DATA

.PHONY: demo test setup browser phoenix bench bench-stream clean lint fmt typecheck docs train-verifier verifier-candidates

setup: $(STAMP)

# torch first, from its CPU build: a bare `torch` requirement would pull a multi-GB CUDA build.
# Everything else comes pinned by constraints.txt so every machine and CI resolve the same versions.
# PYTHONWARNINGS hides setuptools' notice on every editable install (a folder named like the package
# could shadow it): plugins/ and trace/ are mapped into groundlens_core on purpose (package-dir).
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24" wheel
	$(BIN)/python -m pip install -q torch==2.13.0
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: setup
	$(BIN)/python examples/langgraph_rag.py --out out

browser:
	bash .ci/install-chromium.sh

phoenix:
	bash .ci/install-phoenix.sh

test: setup lint docs browser phoenix
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# the documentation site (mkdocs.yml, docs/) into site/: --strict fails on a broken link or anchor, a
# missing page or a page left out of the nav. Offline: no theme plugin reaches the network.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# ruff (lint + format check) and mypy. mypy reads the package as it installs: plugins/ and trace/
# are linked into .typecheck/groundlens_core, where setuptools puts them (package-dir).
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) --no-print-directory typecheck

typecheck: setup
	rm -rf .typecheck/groundlens_core && mkdir -p .typecheck/groundlens_core
	for f in groundlens_core/*; do ln -s "$$PWD/$$f" .typecheck/groundlens_core/; done
	ln -s "$$PWD/plugins" .typecheck/groundlens_core/plugins
	ln -s "$$PWD/trace" .typecheck/groundlens_core/trace
	cd .typecheck && ../$(BIN)/mypy --config-file ../pyproject.toml -p groundlens_core

# rewrite the package in the house style and apply the safe lint fixes
fmt: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: setup
	$(BIN)/python benchmarks/bench_core.py
	$(BIN)/python benchmarks/bench_langgraph_overhead.py
	$(BIN)/python benchmarks/bench_provider_overhead.py
	$(BIN)/python benchmarks/bench_agent_throughput.py
	$(BIN)/python benchmarks/bench_first_record_gap.py
	$(BIN)/python benchmarks/bench_backends.py
	$(BIN)/python benchmarks/bench_evidence_cost.py

# streaming evaluate at 10k/100k/1M rows, cold-text rate, threads 1 vs 2, Ray 1 vs 2 workers (about 30-60 min here)
bench-stream: setup
	$(BIN)/python benchmarks/bench_stream.py

# fit the verifier on CPU from GROUNDLENS_SHARED_DATA (fixed seed; about an hour on 2 cores) and write
# groundlens_core/data/verifier.safetensors + verifier.json. Every stage checkpoints under build/verifier:
# run it again after a stop and it continues where it stopped. Never part of `make test`.
train-verifier: setup
	$(BIN)/python -m groundlens_core.verifier.train --out build/verifier

# the candidates for deciding the band side by side, each validated leaving one whole file out
verifier-candidates: setup
	$(BIN)/python benchmarks/verifier_candidates.py --work build/verifier

clean:
	rm -rf out test-artifacts build dist site *.egg-info
