# The one command surface for humans and CI. `make` lists the targets.
# Everything runs in the project's virtualenv (.venv), made with the system's python3 (on
# Debian: python3 + python3-venv). Installs run once, and again only when pyproject.toml or
# constraints.txt change (stamp files in .venv): then `make run` needs no network.
SYSTEM_PYTHON ?= python3
VENV := $(CURDIR)/.venv
PYTHON := $(VENV)/bin/python
PIP := $(PYTHON) -m pip
export PATH := $(VENV)/bin:$(PATH)
export VIRTUAL_ENV := $(VENV)
# Every pip install takes the versions CI tested; `make lock` rewrites the file.
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt
INSTALL_INPUTS := pyproject.toml constraints.txt
INSTALLED := $(VENV)/.installed
INSTALLED_TEST := $(VENV)/.installed-test
# A recipe touches its stamp first; make deletes it if a later step fails, so install steps
# can simply be appended to a recipe.
.DELETE_ON_ERROR:
HBASE := scripts/hbase/hbase.sh
OPENTSDB := scripts/opentsdb/opentsdb.sh
HBASE_THRIFT_PORT ?= 9090
# The port is one setting, tsd.network.port: TSD_NETWORK_PORT=4302 make run (or
# tsd.network.port in the TSD_CONFIG file); PORT=4302 is a shorthand that sets it.
ifdef PORT
export TSD_NETWORK_PORT := $(PORT)
endif
DEMO_HOURS ?= 24
# sqlite:/// + an absolute path (four slashes): the same file whatever the working directory.
export TSD_STORAGE ?= sqlite:///$(CURDIR)/data/pytsd.db

.DEFAULT_GOAL := help
.PHONY: help install install-test run serve demo test test-fast test-unit screenshots lint fmt \
        typecheck \
        check bench \
        hbase-up hbase-down hbase-status up down ci clean lock oracle-up oracle-down \
        oracle-status test-differential

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(PYTHON):
	scripts/make-venv.sh $(VENV)

# $(call need,module): stop with a hint when .venv lacks a test or dev tool (`make run`
# installs only what serving needs).
need = @$(PYTHON) -c "import $(1)" 2>/dev/null || { echo "$(1) is not installed in .venv: \
run 'make install-test' first (the test and dev tools: pytest, ruff, mypy, Chromium)" >&2; exit 2; }

install: $(INSTALLED)  ## Install pytsd (editable) with the HBase client into .venv
$(INSTALLED): $(INSTALL_INPUTS) | $(PYTHON)
	@touch $@
	@echo "Installing into .venv: pytsd[hbase] and its pip packages, versions from constraints.txt"
	$(PIP) install -q -e '.[hbase]'

install-test: $(INSTALLED_TEST)  ## Install test and dev dependencies (pip packages, Debian chromium and collectd)
$(INSTALLED_TEST): $(INSTALL_INPUTS) | $(PYTHON)
	@touch $@
	@echo "Installing for the tests: pip packages of pytsd[hbase,test,dev] into .venv (versions from constraints.txt); Debian's chromium with apt-get (and collectd-core) if missing"
	$(PIP) install -q -e '.[hbase,test,dev]'
	@touch $(INSTALLED)  # that included everything `make install` installs
	scripts/install-browser.sh
	scripts/install-collectd.sh

lock: install-test  ## Rewrite constraints.txt from .venv (after changing dependencies)
	$(PYTHON) scripts/lock.py > constraints.txt.new
	mv constraints.txt.new constraints.txt
	@touch $(INSTALLED) $(INSTALLED_TEST)  # .venv is what the new file says

run: install  ## Serve on http://127.0.0.1:4242 (TSD_NETWORK_PORT or PORT=...) with demo data (loaded on first run)
	pytsd demo --if-empty --hours $(DEMO_HOURS)
	TSD_CORE_AUTO_CREATE_METRICS=$${TSD_CORE_AUTO_CREATE_METRICS:-true} pytsd serve

serve: install  ## Serve without loading demo data
	pytsd create-tables
	pytsd serve

demo: install  ## (Re)load the demo data set
	pytsd demo

test: install-test  ## Run the whole test suite (HBase tests too when `make hbase-up` ran)
	scripts/run-tests.sh

test-fast:  ## Run the tests without installing first; pytest arguments in ARGS="-x tests/unit"
	$(call need,pytest)
	scripts/run-tests.sh $(ARGS)

test-unit:  ## Run the unit tests only (pure, a few seconds); more pytest arguments in ARGS=
	$(call need,pytest)
	scripts/run-tests.sh -q tests/unit $(ARGS)

screenshots:  ## Regenerate the README's pictures (docs/images/) with the browser tests
	$(call need,pytest)
	TSD_UPDATE_SCREENSHOTS=1 scripts/run-tests.sh -q tests/e2e/test_screenshots_and_grafana.py

lint:  ## ruff check (pyflakes, pycodestyle, isort, bugbear, complexity, import bans)
	$(call need,ruff)
	$(PYTHON) -m ruff check .

fmt:  ## Apply ruff's safe fixes
	$(call need,ruff)
	$(PYTHON) -m ruff check --fix .

typecheck:  ## mypy over app/ and plugin/
	$(call need,mypy)
	$(PYTHON) -m mypy

check: lint typecheck test  ## lint + typecheck + test

bench: install  ## Run the benchmarks and print their figures
	scripts/run-bench.sh

hbase-up: install  ## Start a standalone HBase + Thrift (jars from Maven Central, cached)
	PYTHON=$(PYTHON) HBASE_THRIFT_PORT=$(HBASE_THRIFT_PORT) $(HBASE) start

hbase-down:  ## Stop that HBase
	$(HBASE) stop

hbase-status:  ## Is that HBase running?
	$(HBASE) status

oracle-up:  ## Start the reference OpenTSDB 2.4.1 on that HBase (jars from Maven Central, cached)
	$(OPENTSDB) start

oracle-down:  ## Stop that OpenTSDB
	$(OPENTSDB) stop

oracle-status:  ## Is that OpenTSDB running?
	$(OPENTSDB) status

test-differential:  ## The differential suite: pytsd against OpenTSDB 2.4.1 (needs HBase)
	$(call need,pytest)
	$(PYTHON) -m pytest -q -p no:cacheprovider tests/differential

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
