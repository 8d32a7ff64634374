# Two commands on a fresh machine: `make run` (the whole product) and `make test` (the suite).
# `make run` installs only what the product needs; `make test` and `make lint` add the dev
# extras; `make install` (CI) installs everything up front.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The settings refuse to guess a profile (qtg/profile.py): the one-command demo and the suite
# run the embedded one unless the caller names another.
QTG_PROFILE ?= embedded
export QTG_PROFILE

.PHONY: install install-product install-dev run test lint bench

# The product: its runtime dependencies only.
$(VENV)/.product: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

# Tests and lint: the product plus the dev extras.
$(VENV)/.dev: $(VENV)/.product
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# Node tools for the local stand-ins (anvil devchain, solc), exactly as the committed lockfile
# pins them; nothing is downloaded at run time.
standins/node_modules/.installed: standins/package.json standins/package-lock.json
	npm ci --prefix standins --no-audit --no-fund
	touch $@

install-product: $(VENV)/.product

install-dev: $(VENV)/.dev standins/node_modules/.installed

install: install-dev

run: install-product
	$(PY) manage.py run_embedded

test: install-dev
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: install-product
	$(PY) bench/throughput.py
