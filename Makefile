# The one command surface for humans and CI. `make` lists the targets.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
HBASE := scripts/hbase/hbase.sh
HBASE_THRIFT_PORT ?= 9090
PORT ?= 4242
export TSD_STORAGE ?= sqlite:///$(CURDIR)/data/pytsd.db

.DEFAULT_GOAL := help
.PHONY: help install install-test run serve demo test test-fast lint fmt typecheck check bench \
        hbase-up hbase-down hbase-status up down ci clean

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

install:  ## Install pytsd (editable) with the HBase client
	$(PIP) install -q -e '.[hbase]'

install-test:  ## Install test and dev dependencies (pip packages, Debian chromium)
	$(PIP) install -q -e '.[hbase,test,dev]'
	scripts/install-browser.sh

run: install  ## Serve on http://127.0.0.1:4242 with demo data (loaded on first run)
	pytsd demo --if-empty
	TSD_CORE_AUTO_CREATE_METRICS=$${TSD_CORE_AUTO_CREATE_METRICS:-true} pytsd serve --port $(PORT)

serve: install  ## Serve without loading demo data
	pytsd create-tables
	pytsd serve --port $(PORT)

demo: install  ## (Re)load the demo data set
	pytsd demo

test: install-test  ## Run the whole test suite (HBase tests too when `make hbase-up` ran)
	scripts/run-tests.sh

test-fast:  ## Run the tests without installing anything first
	scripts/run-tests.sh

lint:  ## ruff check (pyflakes, pycodestyle, isort, bugbear, complexity, import bans)
	$(PYTHON) -m ruff check .

fmt:  ## Apply ruff's safe fixes
	$(PYTHON) -m ruff check --fix .

typecheck:  ## mypy over app/ and plugin/
	$(PYTHON) -m mypy

check: lint typecheck test  ## lint + typecheck + test

bench: install  ## Run the benchmarks and print their figures
	scripts/run-bench.sh

hbase-up:  ## Start a standalone HBase + Thrift (jars from Maven Central, cached)
	HBASE_THRIFT_PORT=$(HBASE_THRIFT_PORT) $(HBASE) start

hbase-down:  ## Stop that HBase
	$(HBASE) stop

hbase-status:  ## Is that HBase running?
	$(HBASE) status

up:  ## docker compose up: HBase, pytsd with demo data, provisioned Grafana
	docker compose up -d --build

down:  ## docker compose down (keeps the data volumes)
	docker compose down

ci:  ## What CI runs: lint, typecheck, HBase up, the test suite, HBase down
	scripts/ci.sh

clean:  ## Remove local data and caches
	rm -rf data .pytest_cache .mypy_cache .ruff_cache test-artifacts

.PHONY: fuzz
fuzz:  ## Fuzz every endpoint of docs/openapi.yaml (WSGI and a real server); prints counts
	$(PYTHON) -m pytest -q -s -p no:cacheprovider tests/functional/test_openapi.py \
		tests/e2e/test_fuzz_live.py
