# Two commands for a fresh machine with only Python >= 3.10, Node/npm and make:
#   make demo   sets up and runs the main job
#   make test   sets up and runs the whole test suite
# Setup is stamp-based: re-running is fast when nothing changed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP_STAMP := $(VENV)/.timeshard-installed
NPM_STAMP := node_modules/.timeshard-installed
CHROMIUM_STAMP := $(VENV)/.timeshard-chromium
PYTEST_ARGS ?=

.PHONY: all setup browser test demo bench bench-publish clean help

help:
	@echo "make demo   - set up and run the timeshard demo"
	@echo "make test   - set up and run the test suite (starts Azurite itself, finds or installs Chromium)"
	@echo "make bench  - set up and run the benchmarks"
	@echo "make clean  - remove .venv, node_modules and local state"

setup: $(PIP_STAMP) $(NPM_STAMP)

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "timeshard needs Python >= 3.10, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(PIP_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test]'
	@touch $@

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# The browser tests' Chromium: found on PATH or installed with apt-get once (the stamp holds its path).
browser: | $(PY)
	@sh tests/chromium.sh $(CHROMIUM_STAMP)

test: setup browser
	$(VENV)/bin/ruff check storage cluster handlers benchmarks tests
	$(VENV)/bin/mypy storage cluster handlers
	# Two workers: the Ray tests run one after another on one (see tests/conftest.py), the rest
	# beside them. The simulation replays a seed exactly only with one string hash.
	PYTHONHASHSEED=0 $(PY) -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

demo: setup
	$(VENV)/bin/timeshard demo

bench: setup
	$(PY) -m benchmarks.queue
	$(PY) -m benchmarks.storage
	$(PY) -m benchmarks.suite

# The same runs, written into the committed benchmarks/results/ and docs/benchmarks.md's table.
bench-publish: setup
	$(PY) -m benchmarks.queue --publish
	$(PY) -m benchmarks.storage --publish
	$(PY) -m benchmarks.suite --publish

clean:
	rm -rf $(VENV) node_modules .timeshard .pytest_cache .mypy_cache
