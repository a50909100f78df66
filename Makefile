# The two commands of the README: `make demo` and `make test`. Everything else is a helper.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO_HOST ?= 127.0.0.1
DEMO_PORT ?= 8000
DEMO_PASSWORD ?= demo
export DEMO_PASSWORD

.PHONY: demo test soak lint format clean-demo help

help:
	@echo "make demo   - run the portal with SQLite, an embedded broker and a simulated fleet"
	@echo "make test   - run the full test suite on local PostgreSQL and Redis"
	@echo "make soak   - the production stack under load and faults, then its invariants"
	@echo "              (SOAK_SECONDS=600; needs local PostgreSQL and redis-server)"
	@echo "make lint   - ruff check, format check and the app layers (import-linter)"

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed-runtime: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@ $(VENV)/.installed-runtime

# The portal's settings default to production; the demo opts into development mode.
demo: export DJANGO_DEBUG := 1
demo: $(VENV)/.installed-runtime
	@mkdir -p var
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo
	@echo ""
	@echo "GPU Portal demo: http://$(DEMO_HOST):$(DEMO_PORT)/"
	@echo "  logins (password '$(DEMO_PASSWORD)'):"
	@echo "    alice - member of team vision"
	@echo "    bob   - team admin of nlp"
	@echo "    rita  - unit admin of Research (teams vision and nlp)"
	@echo "    fran  - finance"
	@echo "    admin - platform admin (also /admin/)"
	@echo "  API docs: http://$(DEMO_HOST):$(DEMO_PORT)/api/v1/docs/   Stop with Ctrl-C."
	@echo ""
	DEMO_HOST=$(DEMO_HOST) DEMO_PORT=$(DEMO_PORT) PATH="$(CURDIR)/$(VENV)/bin:$$PATH" \
		$(VENV)/bin/honcho --procfile Procfile.demo start

test: $(VENV)/.installed-test
	$(PY) -m pytest $(PYTEST_ARGS)

SOAK_SECONDS ?= 600
soak: $(VENV)/.installed-test
	$(PY) -m bench.soak --seconds $(SOAK_SECONDS)

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

clean-demo:
	rm -rf var/portal.sqlite3* var/broker
