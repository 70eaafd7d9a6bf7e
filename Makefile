# Every target bootstraps .venv when it is missing (or when pyproject.toml changed).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install test test-slow test-all lint bench demo clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[quant,dev]'
	@touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -m "not slow" -q

test-slow: $(STAMP)
	$(PY) -m pytest -m slow -q

test-all: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(PY) -m ruff check hf_uq metrics tests benchmarks examples

bench: $(STAMP)
	$(PY) benchmarks/bench_metrics.py

# The embedded benchmark end to end (3 seeds, every route): hf_uq_benchmark/report.html; re-runs reuse the models.
demo: $(STAMP)
	$(VENV)/bin/hf-uq benchmark --output hf_uq_benchmark

clean:
	rm -rf build dist *.egg-info .pytest_cache
