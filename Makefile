# Lakeview: `make demo` and `make test` set up .venv (pinned deps, nothing downloaded at run time
# beyond PyPI packages) and run. Needs Python 3.11 and Java 17.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: demo test lint setup check-java check-postgres check-chromium check-ss clean

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

# $(call apt-need,FILE,PACKAGE,WHY): install the Debian PACKAGE when FILE is missing (as root with apt-get),
# else stop with a message naming the package.
define apt-need
@test -x $(1) || { \
  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
    echo "installing $(2) ($(3)) ..."; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(2) >/dev/null 2>&1 || { \
      apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(2) >/dev/null; } || { \
      echo "error: apt-get install $(2) failed"; exit 1; }; \
  else \
    echo "error: $(1) not found; install the Debian package $(2)"; exit 1; \
  fi; }
endef

# The catalog tests start a private PostgreSQL 15 (Debian's postgresql-15 binaries).
PG_BIN ?= /usr/lib/postgresql/15/bin
check-postgres:
	$(call apt-need,$(PG_BIN)/initdb,postgresql-15,the catalog tests run a real PostgreSQL 15)

# The console tests (tests/console) drive Debian's chromium through Playwright; no browser is downloaded.
CHROMIUM ?= /usr/bin/chromium
check-chromium:
	$(call apt-need,$(CHROMIUM),chromium,the console tests run in a real headless browser)

# The catalog's worker tests read which process holds which socket with ss (iproute2).
check-ss:
	$(call apt-need,/usr/bin/ss,iproute2,the catalog worker tests list sockets with ss)

# Lint, format and the layer contracts (pyproject.toml) first: a cycle or an upward import fails the build.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# Bytecode is cached (__pycache__, git-ignored) even where PYTHONDONTWRITEBYTECODE is set: each of the Python
# processes the suite starts (`lakeview up`, `lakeview refresh` killed and restarted) would otherwise compile
# the project's modules again, and pytest would rewrite every test module's asserts again on each run.
test: check-java check-postgres check-chromium check-ss lint $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) demo-project .pytest_cache
