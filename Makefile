# Two commands on a fresh machine: `make run` (the whole product) and `make test` (the suite).
# `make run` installs only what the product needs; `make test` and `make lint` add the dev
# extras; `make install` (CI) installs everything up front.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# The suite runs in this many pytest-xdist processes (0: in this one). Each has its own test
# database (pytest-django's _gw<n> suffix) and var directory (tests/embedded_profile.py); a
# test file stays on one process (--dist loadfile) so its module fixtures start once. Half
# the suite waits on processes and sockets, so 4 on a 2-core machine beats 2.
TEST_WORKERS ?= 4
# pytest exits 5 when the selection is empty; with ALLOW_NO_TESTS=1 that is reported, not failed
# (CI's marker runs, on a machine where a marker's tests are all deselected).
ALLOW_NO_TESTS ?=
# The settings refuse to guess a profile (qtg/profile.py): the one-command demo and the suite
# run the embedded one unless the caller names another.
QTG_PROFILE ?= embedded
export QTG_PROFILE

.PHONY: install install-product install-dev run run-local test lint bench audit screenshots

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

# QTG_VENUES=local runs the same command through the stand-ins' entry (standins/local/), which
# starts them first: the product never imports the stand-ins.
run: install-product
	@if [ "$$QTG_VENUES" = local ]; then $(MAKE) --no-print-directory run-local; \
	else $(PY) manage.py run_embedded; fi

run-local: install-product standins/node_modules/.installed
	QTG_VENUES=local $(PY) -m standins.local

test: install-dev
	@echo "pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)"; started=$$(date +%s); \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS); rc=$$?; \
	echo "make test: pytest exited $$rc after $$(( $$(date +%s) - started ))s"; \
	if [ $$rc -eq 5 ] && [ -n "$(ALLOW_NO_TESTS)" ]; then \
		echo "make test: no test selected by $(PYTEST_ARGS) (exit 5 allowed)"; exit 0; fi; \
	exit $$rc

lint: $(VENV)/.dev
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

# The committed screenshots of the console's main screens (home, list, a MANUAL_INTERVENTION
# movement, override proposals), taken by the browser tests in Debian's Chromium.
screenshots: install-dev
	QTG_SCREENSHOTS_DIR=$(CURDIR)/docs/screenshots $(PY) -m pytest -p no:xdist -q \
		tests/admin/test_browser.py -k "main_screens or manual_intervention_page"

bench: install-product
	$(PY) bench/throughput.py

# Known vulnerabilities in the installed packages (pip-audit asks PyPI's / OSV's service: run
# it where they can be reached; this build machine cannot).
$(VENV)/.audit: $(VENV)/.product
	$(PY) -m pip install --quiet -e '.[audit]'
	touch $@

audit: $(VENV)/.audit
	$(VENV)/bin/pip-audit --skip-editable --progress-spinner off || { \
		echo "make audit: vulnerable packages listed above, or the vulnerability service could not be reached"; exit 1; }
