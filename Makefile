# Two commands on a fresh machine: `make run` (the whole product) and `make test` (the suite).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The settings refuse to guess a profile (qtg/profile.py): the one-command demo and the suite
# run the embedded one unless the caller names another.
QTG_PROFILE ?= embedded
export QTG_PROFILE

.PHONY: install run test lint bench

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# Node tools for the local stand-ins (anvil devchain, solc), exactly as the committed lockfile
# pins them; nothing is downloaded at run time.
standins/node_modules/.installed: standins/package.json standins/package-lock.json
	npm ci --prefix standins --no-audit --no-fund
	touch $@

install: $(VENV)/.installed standins/node_modules/.installed

run: install
	$(PY) manage.py run_embedded

test: install
	$(PY) -m pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench: install
	$(PY) bench/throughput.py
