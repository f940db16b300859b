# The two set-up commands: `make demo` (the main job on embedded defaults) and `make test`.
# Both create the virtual environment in .venv and install what they need.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint protos docs migration bench clean containers

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[api,node,jobs,smt,clearml,dev,bench]'
	touch $@

demo: $(VENV)/.installed
	$(BIN)/serval demo

# The whole suite on SQLite and, at the same time, the tests that use a database again on a private
# throwaway PostgreSQL cluster (scripts/postgres.sh); the PostgreSQL pass's output follows the SQLite one's.
# SERVAL_TEST_SPLIT_PASSES moves a few slow modules that run once to the PostgreSQL pass (tests/conftest.py),
# unless SERVAL_TEST_POSTGRES=skip leaves that pass out. Each pass ends with its 20 slowest tests.
test: lint
	@scripts/system-packages.sh
	@mkdir -p .serval
	@export SERVAL_TEST_SPLIT_PASSES=$$([ "$${SERVAL_TEST_POSTGRES:-}" = skip ] || echo 1); \
	scripts/postgres.sh run $(BIN)/python -m pytest -q --durations=20 -p no:cacheprovider >.serval/postgres-pass.log 2>&1 & pg=$$!; \
	$(BIN)/python -m pytest -q --durations=20; sqlite=$$?; \
	wait $$pg; postgres=$$?; \
	echo "--- the PostgreSQL pass (exit $$postgres) ---"; cat .serval/postgres-pass.log; \
	test $$sqlite -eq 0 -a $$postgres -eq 0

lint: $(VENV)/.installed
	$(BIN)/python scripts/gen_protos.py --check
	$(BIN)/python scripts/gen_api_docs.py --check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

protos: $(VENV)/.installed
	$(BIN)/python scripts/gen_protos.py

# The API reference in docs/reference/ (gRPC from protos/, REST from the FastAPI app); lint checks it is current.
docs: $(VENV)/.installed
	$(BIN)/python scripts/gen_api_docs.py

# After a model change: autogenerate the next migration, e.g. make migration MESSAGE="add pretranslations".
migration: $(VENV)/.installed
	$(BIN)/python -m serval_api.db.migrations.regenerate "$(MESSAGE)"

# The serving benchmark (bench/README.md): every scenario, one table per model, bench/results/serving.json.
bench: $(VENV)/.installed
	$(BIN)/python -m bench

# The three images (docker/*.Dockerfile) built with podman on local Debian bases and smoke-run on
# loopback: API, the Helm chart's API pod under `podman kube play`, node and a build job
# (scripts/container-smoke.sh; root, Debian). CI runs it after `make test`.
containers: $(VENV)/.installed
	scripts/container-smoke.sh

clean:
	rm -rf $(VENV) .serval
