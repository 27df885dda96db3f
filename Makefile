# fwrest developer tasks. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help run test test-serial lint fmt check bench soak docs clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t12

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fwrest needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)  ## set up, then start the example service in examples/
	$(BIN)/python examples/make_certs.py
	$(BIN)/fwrest serve examples/service.ini

check: $(STAMP)  ## validate the example service's configuration
	$(BIN)/fwrest check examples/service.ini

lint: $(STAMP)  ## ruff (lint + format check), mypy --strict, hadolint and kubernetes-validate on deploy/
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/mypy
	$(BIN)/hadolint deploy/Dockerfile
	$(BIN)/kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml

fmt: $(STAMP)  ## format the code with ruff
	$(BIN)/ruff check --fix src tests examples bench
	$(BIN)/ruff format src tests examples bench

# `make test` runs the suite's two parts at once (tests/conftest.py SERIAL says which is which):
# the serial part (deadlines, load, timing) at normal priority, one test at a time, and the
# parallel part (two test files at once) at a low CPU priority (nice 10), so that it takes
# mostly the CPU the serial part leaves: that one spends most of its time waiting on deadlines
# and sockets (it uses under half of the two cores), and keeps the CPU its deadlines need when
# it loads the machine. The parallel part's output is kept in .pytest-parallel.log and shown
# when both parts have ended.
PARALLEL_LOG := .pytest-parallel.log

test: lint  ## set up, lint, then the whole suite: the serial part and, at low priority, the rest
	@nice -n 10 $(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder -m "not serial" \
		>$(PARALLEL_LOG) 2>&1 & parallel=$$!; \
	$(BIN)/pytest -m serial; serial=$$?; \
	wait $$parallel; rest=$$?; \
	echo "== the parallel part (pytest -n 2 -m 'not serial'), run beside it at nice 10:"; \
	cat $(PARALLEL_LOG); \
	echo "== serial part: exit $$serial; parallel part: exit $$rest"; \
	[ $$serial -eq 0 ] && [ $$rest -eq 0 ]

test-serial: lint  ## the same suite, one test at a time (slower; for a machine with one core)
	$(BIN)/pytest

bench: $(STAMP)  ## side-by-side benchmark vs uvicorn/Starlette/FastAPI (< 15 min; bench/README.md)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	@command -v wrk >/dev/null 2>&1 && [ -x /usr/sbin/nginx ] && command -v ss >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq wrk nginx iproute2; \
		else sudo apt-get update -qq && sudo apt-get install -y -qq wrk nginx iproute2; fi; }
	$(BIN)/python -m bench.run $(BENCH_ARGS)

soak: $(STAMP)  ## long soak (30 min, bench/soak.py) and the 200,000-request mutation run (SPEC 9)
	$(BIN)/python -m bench.soak
	FWREST_MUTATIONS=200000 $(BIN)/pytest tests/hostile/test_mutation.py --timeout=0

docs: $(STAMP)  ## build the user guide (MkDocs) into site/, failing on any warning
	$(BIN)/python -m fwrest.config.reference > docs/configuration.md
	$(BIN)/mkdocs build --strict

clean:  ## remove the virtual environment and caches
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache site
