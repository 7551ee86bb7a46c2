# onnx-reducer: two commands a newcomer needs (see README.md).
#   make run   installs and runs the main job
#   make test  installs and passes the tests (lint, types, import contracts, pytest)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Two stamps: `make run` installs the runtime only; `make test` adds the dev tools (and so
# satisfies both).
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.installed-runtime
RUN_DIR ?= build/example

.PHONY: install install-runtime run example test services browser lint typecheck contracts pytest bench bench-localize bench-parallel screenshots clean

$(VENV)/bin/python:
	$$(scripts/ensure-python.sh) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME_STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME_STAMP)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(RUNTIME_STAMP)

install: $(STAMP)
install-runtime: $(RUNTIME_STAMP)

# The service on its embedded defaults, kept in ./data here (ONNX_REDUCER_HOME; elsewhere the
# default is the user's data folder): SQLite and the artifact store, jobs run in the server
# process. `serve` prints the `token create` command for this home. Set DATABASE_URL/REDIS_URL/DATA_DIR for other setups (README "Service").
HOST ?= 127.0.0.1
PORT ?= 8000
ONNX_REDUCER_HOME ?= $(CURDIR)/data
# One readable line per request; `make run LOG_FORMAT=json` for JSON lines.
LOG_FORMAT ?= text
run: $(RUNTIME_STAMP)
	ONNX_REDUCER_HOME=$(ONNX_REDUCER_HOME) PATH=$(abspath $(BIN)):$$PATH onnx-reducer db upgrade
	@echo "Service: http://$(HOST):$(PORT)  (web UI; API docs: http://$(HOST):$(PORT)/docs)"
	ONNX_REDUCER_HOME=$(ONNX_REDUCER_HOME) LOG_FORMAT=$(LOG_FORMAT) PATH=$(abspath $(BIN)):$$PATH onnx-reducer serve --host $(HOST) --port $(PORT)

# Reduce the bundled example on the command line (the Mul of Polygraphy's example).
example: $(RUNTIME_STAMP)
	mkdir -p $(RUN_DIR)
	$(BIN)/python examples/build_example_model.py $(RUN_DIR)/model.onnx
	cd $(RUN_DIR) && PATH=$(abspath $(BIN)):$$PATH onnx-reducer reduce model.onnx -o reduced.onnx \
		--min-good good.onnx --fail-regex "Op: Mul" --check onnx-reducer inspect polygraphy_debug.onnx
	$(BIN)/onnx-reducer inspect $(RUN_DIR)/reduced.onnx

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check reducer_core reducer_cli reducer_client checks engine persistence api worker tests/service tests/client

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

# PostgreSQL and Redis for tests/service: used when running, else started from installed binaries.
services:
	scripts/test-services.sh

# Headless Chromium and chromedriver for the web UI tests (tests/service/test_web_ui.py), installed
# with apt-get when missing; those tests fail without them.
browser:
	scripts/test-browser.sh

# pytest-xdist: 4 workers (tests mostly wait on subprocesses, so more than the 2 cores pay off);
# each worker has its own Redis database (TEST_REDIS_URL's number plus the worker's index) and
# a file's tests run on one worker in order, sharing its module fixtures (--dist loadfile;
# pytest-xdist's loadgroup does not group under pytest 9.2). `make pytest PYTEST_XDIST=` runs
# serially; PYTEST_ARGS adds pytest arguments (paths, -k, -x).
PYTEST_XDIST ?= -n 4 --dist loadfile
pytest: $(STAMP) services browser
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

test: lint typecheck contracts services browser pytest

bench: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python bench/run_bench.py $(BENCH_ARGS)

# Localisation (issue 3): planted fp16 overflow, checks with/without localisation (bench/README.md).
bench-localize: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python bench/localize_bench.py $(BENCH_ARGS)

# Parallel checks (issue 9): --jobs 1/2/4/8 with checks that sleep 0.5 s (bench/README.md, ~7 min).
bench-parallel: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python bench/parallel_bench.py $(BENCH_ARGS)

# The web page's screenshots in docs/screenshots/ (README), taken in headless Chromium.
screenshots: $(STAMP) browser
	PATH=$(abspath $(BIN)):$$PATH PYTHONPATH=. $(BIN)/python scripts/web_screenshots.py docs/screenshots

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache
