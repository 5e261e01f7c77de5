# The commands in the README. Each installs the project into .venv first, again only when pyproject.toml
# has changed since (the stamp files in .venv).
#   make run   [HOST=127.0.0.1] [PORT=8000]   Redis, a Celery worker, beat and the web server, supervised (rlweb/devserver.py)
#   make test  [PYTEST_ARGS="tests/web -x"]   all but the learning checks: the pages' scripts' unit tests, then pytest
#   make test-learning                        the learning checks that `make test` skips (marked learning)
#   make test-js                              the unit tests of the pages' scripts (tests/js; node's own runner)
#   make bench [BENCH_ARGS=...]               the benchmarks
#   make vendor-plotly                        plotly.js's cartesian bundle into static/vendor/plotly (needs npm),
#                                             at the plotly.js version of the installed plotly package; every
#                                             page that draws charts loads it through templates/_plotly.html

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
PYTEST_ARGS ?=
BENCH_ARGS ?=
PIP_INSTALL ?= $(PY) -m pip install
NODE ?= node

.PHONY: run test test-js test-learning bench vendor-plotly

run: $(VENV)/.installed
	$(PY) -m rlweb.devserver --host $(HOST) --port $(PORT)

# Without REDIS_URL the tests start a throwaway Redis of their own (tests/conftest.py).
test: test-js $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_ARGS)

test-learning: $(VENV)/.installed
	$(PY) -m pytest -m learning $(PYTEST_ARGS)

# The pure parts of the pages' scripts (static/experiments/lib), as ES modules under node 20 or newer; no npm packages.
test-js:
	@command -v $(NODE) >/dev/null || { echo "make test-js needs node 20 or newer (apt-get install nodejs)," \
		"to unit-test the pages' scripts (tests/js): not found"; exit 1; }
	$(NODE) --test --test-reporter=spec tests/js/

bench: $(VENV)/.installed-bench
	$(PY) -m benchmarks $(BENCH_ARGS)

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
		|| { echo "rlweb needs Python 3.11 or newer: make PYTHON=/path/to/python3.11 ..."; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP_INSTALL) -e '.[test]'
	@touch $@

$(VENV)/.installed-bench: pyproject.toml | $(PY)
	$(PIP_INSTALL) -e '.[test,bench]'
	@touch $@

vendor-plotly: $(VENV)/.installed
	@version=$$($(PY) -c 'import pathlib, plotly, re; \
		head = (pathlib.Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_text()[:200]; \
		print(re.search(r"plotly.js v([0-9.]+)", head).group(1))') && \
	work=$$(mktemp -d) && cd "$$work" && npm pack --silent plotly.js-cartesian-dist-min@$$version >/dev/null && \
	tar xzf plotly.js-cartesian-dist-min-$$version.tgz && cd - >/dev/null && \
	rm -f static/vendor/plotly/plotly-cartesian-*.min.js && \
	cp "$$work/package/plotly-cartesian.min.js" static/vendor/plotly/plotly-cartesian-$$version.min.js && \
	cp "$$work/package/LICENSE" static/vendor/plotly/LICENSE && rm -r "$$work" && \
	sed -i "s|vendor/plotly/plotly-cartesian-[0-9.]*\.min\.js|vendor/plotly/plotly-cartesian-$$version.min.js|" \
		templates/_plotly.html && \
	echo "static/vendor/plotly/plotly-cartesian-$$version.min.js"
