# onnx-reducer: two commands a newcomer needs (see README.md).
#   make run   installs and runs the main job
#   make test  installs and passes the tests (lint, types, import contracts, pytest)
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_DIR ?= build/example

.PHONY: install run test lint typecheck contracts pytest bench clean

$(STAMP): pyproject.toml
	$$(scripts/ensure-python.sh) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# Until the service exists: reduce the bundled example (the Mul of Polygraphy's example).
run: $(STAMP)
	mkdir -p $(RUN_DIR)
	$(BIN)/python examples/build_example_model.py $(RUN_DIR)/model.onnx
	cd $(RUN_DIR) && PATH=$(abspath $(BIN)):$$PATH onnx-reducer reduce model.onnx -o reduced.onnx \
		--min-good good.onnx --fail-regex "Op: Mul" --check onnx-reducer inspect polygraphy_debug.onnx
	$(BIN)/onnx-reducer inspect $(RUN_DIR)/reduced.onnx

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check reducer_core reducer_cli checks engine

typecheck: $(STAMP)
	$(BIN)/mypy

contracts: $(STAMP)
	$(BIN)/lint-imports

pytest: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/pytest $(PYTEST_ARGS)

test: lint typecheck contracts pytest

bench: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/python bench/run_bench.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build .mypy_cache .ruff_cache .pytest_cache
