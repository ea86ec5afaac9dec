# kdist: `make train` and `make test` set everything up on a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.kdist-installed
ARGS ?=

.PHONY: install train test test-all lint bench bench-quick clean docs doctor

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade --quiet pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# Train the default job (MLP on the embedded digits data); pass overrides with ARGS="...".
train: $(STAMP)
	$(PY) -m kdist.train $(ARGS)

# docs/: a page per config group, generated from conf/ and the schemas (tests check it).
docs: $(STAMP)
	$(PY) -m kdist.docs

# Versions, devices, a two-step run under each strategy, the cluster environment.
doctor: $(STAMP)
	$(PY) -m kdist.doctor

lint: $(STAMP)
	$(PY) -m ruff check kdist tests benchmarks
	$(PY) -m ruff format --check kdist tests benchmarks
	$(PY) -m yamllint -s kdist/conf recipes
	$(PY) -m mypy

# The fast suite (not `slow`), as CI runs it.
test: lint
	$(PY) -m pytest -m "not slow" $(ARGS)

# Everything, slow end-to-end cases included.
test-all: lint
	$(PY) -m pytest $(ARGS)

# Benchmarks (benchmarks/README.md): kdist against hand-written TensorFlow and Keras `fit`.
# `bench` writes benchmarks/results/ (about 20 minutes on 2 cores); `bench-quick` is a
# smoke run into outputs/benchmarks-quick/ (under a minute). Pass options with ARGS="...".
bench: $(STAMP)
	$(PY) -m benchmarks $(ARGS)

bench-quick: $(STAMP)
	$(PY) -m benchmarks --quick $(ARGS)

clean:
	rm -rf outputs multirun .pytest_cache .mypy_cache .ruff_cache build *.egg-info
