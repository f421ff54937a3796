# The two commands people use are `make demo` and `make test`; both set up what is missing first.
SHELL := /bin/bash
VENV := .venv/bin
export STREAMFOLD_HOME ?= $(CURDIR)/.streamfold

.PHONY: setup demo test unit e2e lint bench stack-down clean

setup:
	@bash scripts/bootstrap.sh

demo: setup
	@bash scripts/demo.sh

lint: setup
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/mypy streamfold pipeline connectors db compose

# Unit tests first (seconds), then the end-to-end suite on one shared local stack.
test: setup lint
	$(VENV)/pytest tests/unit -q
	$(VENV)/pytest tests/e2e -q

unit: setup
	$(VENV)/pytest tests/unit -q

e2e: setup
	$(VENV)/pytest tests/e2e -q

bench: setup
	$(VENV)/python -m bench.run $(BENCH_ARGS)

stack-down:
	-$(VENV)/streamfold stack down

clean: stack-down
	rm -rf .streamfold
