# Two commands on a fresh machine: `make run` (the whole product) and `make test` (the suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install run test lint bench

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) manage.py run_embedded

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: install
	$(PY) bench/throughput.py
