# fwrest developer tasks. `make help` lists them.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help run wheel test test-compiled test-pure test-compiled-only test-pure-slice test-engine-slice test-serial lint fmt check bench soak docs clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t15

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "fwrest needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)  ## set up, then start the example service in examples/
	$(BIN)/python examples/make_certs.py
	$(BIN)/fwrest serve examples/service.ini

check: $(STAMP)  ## validate the example service's configuration (its certificates made first, as by run)
	$(BIN)/python examples/make_certs.py
	$(BIN)/fwrest check examples/service.ini

lint: $(STAMP)  ## ruff, mypy --strict, the compiled modules' mypyc lint, hadolint and kubernetes-validate on deploy/
	$(BIN)/ruff check src tests examples bench
	$(BIN)/ruff format --check src tests examples bench
	$(BIN)/mypy
	$(BIN)/python -m tests.tools.mypyc_lint  # what mypyc cannot build or builds differently
	$(BIN)/python -m tests.tools.stale_refs  # modules named in docstrings and the code map exist
	$(BIN)/hadolint deploy/Dockerfile
	$(BIN)/kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml

fmt: $(STAMP)  ## format the code with ruff
	$(BIN)/ruff check --fix src tests examples bench
	$(BIN)/ruff format src tests examples bench

# The compiled wheel users install (setup.py compiles COMPILED with mypyc), built from the sdist
# (as pip builds one from PyPI; tests/packaging reads both files rather than building them again)
# once for the sources as they are (the stamp is named after their hash: an edit builds it again), installed
# non-editable with the dev extra's dependencies into its own environment, .venv-wheel, where
# the checkout's sources are not importable (tests/conftest.py checks it: FWREST_TEST_BUILD).
WHEEL_VENV   := .venv-wheel
WHEEL_DIR    := .wheel
SOURCES_HASH  = $(shell cat setup.py pyproject.toml $$(find src/fwrest -type f ! -path '*/__pycache__/*' ! -name '*.so' ! -name engine.c | LC_ALL=C sort) | sha256sum | cut -c1-16)
WHEEL_STAMP   = $(WHEEL_VENV)/.installed-$(SOURCES_HASH)

wheel: $(STAMP)  ## build the compiled wheel and install it into .venv-wheel (once per change)
	@$(MAKE) --no-print-directory $(WHEEL_STAMP)

$(WHEEL_VENV)/.installed-%:
	rm -rf $(WHEEL_DIR) $(WHEEL_VENV)/.installed-*
	@echo "FWREST_COMPILE=1 python -m build (the sdist, then the compiled wheel from it: about two minutes)"
	@FWREST_COMPILE=1 $(BIN)/python -m build --outdir $(WHEEL_DIR) . >$(WHEEL_DIR).log 2>&1 \
		|| { tail -40 $(WHEEL_DIR).log; exit 1; }
	[ -x $(WHEEL_VENV)/bin/python ] || $(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/pip install --quiet --upgrade pip
	$(WHEEL_VENV)/bin/pip install --quiet --force-reinstall --no-deps $(WHEEL_DIR)/fwrest-*.whl
	$(WHEEL_VENV)/bin/pip install --quiet "$$(ls $(WHEEL_DIR)/fwrest-*.whl)[dev]"
	@touch $@

# `make test` runs the whole suite on the compiled wheel (.venv-wheel), then the pure build
# (.venv's editable install) over PURE_SLICE: the folders of the modules setup.py compiles,
# where the two builds could differ (both in full would take CI past its 30 minutes;
# tests/packaging runs once, in the first run: it builds its own wheel and sdist).
# Each run has two parts at once (tests/conftest.py SERIAL says which is which): the serial
# part (deadlines, load, timing) at normal priority, one test at a time, and the parallel part
# (two test files at once) at a low CPU priority (nice 10), so that it takes mostly the CPU the
# serial part leaves: that one spends most of its time waiting on deadlines and sockets (it
# uses under half of the two cores), and keeps the CPU its deadlines need when it loads the
# machine. The parallel part's output is kept in .pytest-parallel.log and shown when both parts
# have ended. `make test-compiled` and `make test-pure` run one build each.
PARALLEL_LOG := .pytest-parallel.log
# Left out of those folders: modules whose subject no compiled module is (the key set and its
# command, the users command, the workers' hooks, tracing, the start API, the token service's
# stores and hosts): the same code in both builds, run once in the compiled run.
PURE_SLICE := tests/routing tests/context tests/server tests/auth tests/features tests/hostile \
	tests/test_testing.py tests/test_log.py \
	--ignore=tests/auth/test_keys.py --ignore=tests/auth/test_users_cli.py \
	--ignore=tests/auth/test_oauth2_store.py --ignore=tests/server/test_hooks_workers.py \
	--ignore=tests/server/test_tracing.py --ignore=tests/server/test_start_api.py

# $(call suite,BIN,BUILD,PATHS): both parts of the suite, over PATHS (all of tests/ if empty;
# a slice may hold no test of one part: pytest's 5, no tests collected, is then no failure)
define suite
	@echo "== the $(2) build ($(1)/python), the $${FWREST_ENGINE:-native} engine$(if $(3), over: $(3))"
	@FWREST_TEST_BUILD=$(2) nice -n 10 $(1)/pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=12 \
		-m "not serial" $(3) >$(PARALLEL_LOG) 2>&1 & parallel=$$!; \
	FWREST_TEST_BUILD=$(2) $(1)/pytest -m serial --durations=12 $(3); serial=$$?; \
	wait $$parallel; rest=$$?; \
	echo "== the parallel part (pytest -n 2 -m 'not serial'), run beside it at nice 10:"; \
	cat $(PARALLEL_LOG); \
	echo "== the $(2) build: serial part: exit $$serial; parallel part: exit $$rest"; \
	$(if $(3),[ $$serial -ne 5 ] || serial=0; [ $$rest -ne 5 ] || rest=0;) \
	[ $$serial -eq 0 ] && [ $$rest -eq 0 ]
endef

test: lint wheel  ## set up, lint, then the suite on the compiled wheel, (a slice) the pure build and the pure engine
	@$(MAKE) --no-print-directory test-compiled-only; compiled=$$?; \
	$(MAKE) --no-print-directory test-pure-slice; pure=$$?; \
	$(MAKE) --no-print-directory test-engine-slice; engine=$$?; \
	echo "== make test: the compiled build: exit $$compiled; the pure build: exit $$pure; the pure engine: exit $$engine"; \
	[ $$compiled -eq 0 ] && [ $$pure -eq 0 ] && [ $$engine -eq 0 ]

test-compiled: lint wheel  ## lint, then the whole suite on the compiled wheel only
	@$(MAKE) --no-print-directory test-compiled-only

# The compiled wheel's run serves with the native engine (the default, docs/engine.md); the
# pure build's run is the fallback of a machine without a C compiler: pure Python and the pure
# engine (httptools), FWREST_ENGINE=pure.
test-pure: export FWREST_ENGINE := pure
test-pure: lint  ## lint, then the whole suite on the pure build (.venv's editable install) and the pure engine
	$(call suite,$(BIN),pure,)

test-compiled-only:
	$(call suite,$(WHEEL_VENV)/bin,compiled,)

test-pure-slice: export FWREST_ENGINE := pure
test-pure-slice:
	$(call suite,$(BIN),pure,$(PURE_SLICE))

# The pure engine on the compiled wheel (what FWREST_ENGINE=pure serves with, or a wheel whose
# native build failed): the engine's folders (tests/server, the hostile corpus, slowloris,
# streaming, the TLS handshake's bound, the client certificate) again, their servers started
# with FWREST_ENGINE=pure. Their modules that start no server (tests/conftest.py ENGINE_FREE)
# test no engine and are not collected there.
ENGINE_SLICE := tests/server tests/hostile tests/faults/test_slowloris.py tests/features/test_streaming.py \
	tests/faults/test_tls_handshakes.py tests/context/test_client_certificate.py

test-engine-slice: export FWREST_ENGINE := pure
test-engine-slice: export FWREST_ENGINE_SLICE := 1
test-engine-slice: wheel  ## the engine's folders on the compiled wheel with the pure engine
	$(call suite,$(WHEEL_VENV)/bin,compiled,$(ENGINE_SLICE))

test-serial: lint  ## the whole suite on the pure build, one test at a time (for one core)
	FWREST_TEST_BUILD=pure $(BIN)/pytest

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
	rm -rf $(VENV) $(WHEEL_VENV) $(WHEEL_DIR) $(WHEEL_DIR).log .pytest_cache .mypy_cache .ruff_cache site .upgrade-venv-*
