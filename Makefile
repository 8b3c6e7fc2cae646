# topicstream — the two commands a new user needs are `make run` and `make test`.
# Both create the virtual environment and install everything they need themselves.

PYTHON  ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# Articles for `make run`: empty = generated offline; or a JSONL(.gz) file of articles.
ARTICLES ?=
RATE     ?= 500
ARGS     ?=

.PHONY: run test lint bench docs clean help

help:
	@echo "make run    start a local broker + Redis (unless TOPICSTREAM_KAFKA_BOOTSTRAP/TOPICSTREAM_REDIS_URL are set),"
	@echo "            stream articles through the learner and show the live topics (Ctrl-C stops everything)"
	@echo "            ARTICLES=path.jsonl[.gz] replays a file instead of generated articles; RATE=articles/s"
	@echo "            ARGS=\"--duration 60\" stops it after a minute (any option of topicstream demo --help)"
	@echo "make test   run the whole test suite against a real broker and a real Redis"
	@echo "make lint   ruff check, ruff format --check and mypy (no tests)"
	@echo "make clean  remove .venv/, the caches and numba's on-disk cache"
	@echo "make bench  regenerate docs/benchmarks.md against the peers, then the end-to-end service benchmark"
	@echo "make docs   regenerate the README's and docs' tables that come from the code (settings, metrics, ...)"

# numba checks a cached function against its own source file only, not against the jitted functions it calls in
# other modules (numba issue 1833): after `git pull` changed one of those, the cache would run the old machine code.
# So any change to kernels/ (or another file with jitted code) drops the whole numba cache before the next run, test
# or bench; the recompilation costs about a minute.
NUMBA_SOURCES := $(wildcard kernels/*.py) $(shell grep -rl --include='*.py' njit service evaluation 2>/dev/null)
NUMBA_STAMP   := $(VENV)/.numba-sources

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $@

$(NUMBA_STAMP): $(NUMBA_SOURCES) $(STAMP)
	find kernels service evaluation \( -name '*.nbi' -o -name '*.nbc' \) -delete
	rm -rf $(VENV)/numba-cache
	@touch $@

run: $(STAMP) $(NUMBA_STAMP)
	$(BIN)/topicstream demo $(if $(ARTICLES),--articles $(ARTICLES)) --rate $(RATE) $(ARGS)

# Two pytest workers (pytest-xdist), each with its own broker, Redis and numba cache ($(VENV)/numba-cache, set in
# tests/conftest.py): most integration tests wait on brokers, timeouts and child processes, so two share two cores
# well (the whole suite takes about 11 minutes with two on 2 cores).
test: $(STAMP) $(NUMBA_STAMP)
	$(BIN)/ruff check kernels service evaluation tests benchmarks
	$(BIN)/mypy
	$(BIN)/python -m pytest -n 2

lint: $(STAMP)
	$(BIN)/ruff check kernels service evaluation tests benchmarks
	$(BIN)/ruff format --check kernels service evaluation tests benchmarks
	$(BIN)/mypy

docs: $(STAMP)
	$(BIN)/python -m service.doctables README.md docs/*.md

$(VENV)/.bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	@touch $@

bench: $(VENV)/.bench $(NUMBA_STAMP)
	$(BIN)/python -m benchmarks.run_all
	$(BIN)/python -m benchmarks.bbc_five_seconds
	$(BIN)/python -m benchmarks.run_all --docs-only
	$(BIN)/python -m benchmarks.bench_service

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
