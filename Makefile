# Lakeview: `make demo` and `make test` set up .venv (pinned deps, nothing downloaded at run time
# beyond PyPI packages) and run. Needs Python 3.11 and Java 17.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: demo test lint setup check-java check-postgres check-chromium clean

setup: $(STAMP)

check-java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "error: Java 17 is required by Spark but 'java' was not found."; \
	  echo "       Install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and re-run."; exit 1; }
	@java -version 2>&1 | grep -Eq 'version "17[."]' || { \
	  echo "error: Java 17 is required by Spark 3.5; found: $$(java -version 2>&1 | head -1)"; \
	  echo "       Install openjdk-17-jre-headless and put it first on PATH (or set JAVA_HOME)."; exit 1; }

$(STAMP): pyproject.toml | check-java
	@$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, found " + sys.version.split()[0]' \
	  || { echo "error: set PYTHON=/path/to/python3.11"; exit 1; }
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@echo "installing pinned dependencies into $(VENV) (first time: about a minute) ..."
	@$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
	@$(VENV)/bin/python -c 'import pyspark, pyiceberg, duckdb, lakeview' || { echo "error: installation failed"; exit 1; }
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

demo: check-java $(STAMP)
	$(VENV)/bin/lakeview demo

# The catalog tests start a private PostgreSQL 15 (Debian's postgresql-15 binaries).
PG_BIN ?= /usr/lib/postgresql/15/bin
check-postgres:
	@test -x $(PG_BIN)/initdb || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing postgresql-15 (the catalog tests run a real PostgreSQL 15) ..."; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 >/dev/null 2>&1 || { \
	      apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15 >/dev/null; } || { \
	      echo "error: apt-get install postgresql-15 failed"; exit 1; }; \
	  else \
	    echo "error: PostgreSQL 15 binaries not found in $(PG_BIN); install the Debian package postgresql-15"; exit 1; \
	  fi; }

# The console tests (tests/console) drive Debian's chromium through Playwright; no browser is downloaded.
CHROMIUM ?= /usr/bin/chromium
check-chromium:
	@test -x $(CHROMIUM) || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium (the console tests run in a real headless browser) ..."; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || { \
	      apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; } || { \
	      echo "error: apt-get install chromium failed"; exit 1; }; \
	  else \
	    echo "error: chromium not found at $(CHROMIUM); install the Debian package chromium"; exit 1; \
	  fi; }

# Lint, format and the layer contracts (pyproject.toml) first: a cycle or an upward import fails the build.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

test: check-java check-postgres check-chromium lint $(STAMP)
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) demo-project .pytest_cache
