# The commands in the README. Each installs the project into .venv first, again only when pyproject.toml
# has changed since (the stamp files in .venv).
#   make run   [HOST=127.0.0.1] [PORT=8000]   Redis, a Celery worker, beat and the web server, supervised (rlweb/devserver.py)
#   make test  [PYTEST_ARGS="tests/web -x"]   the whole test suite
#   make bench [BENCH_ARGS=...]               the benchmarks

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
BENCH_ARGS ?=

.PHONY: run test bench

run: $(VENV)/.installed
	$(PY) -m rlweb.devserver --host $(HOST) --port $(PORT)

# Without REDIS_URL the tests start a throwaway Redis of their own (tests/conftest.py).
test: $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed-bench
	$(PY) -m benchmarks $(BENCH_ARGS)

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
		|| { echo "rlweb needs Python 3.11 or newer: make PYTHON=/path/to/python3.11 ..."; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[test]'
	@touch $@

$(VENV)/.installed-bench: pyproject.toml | $(PY)
	$(PY) -m pip install -e '.[test,bench]'
	@touch $@
