# clsbench: `make run` sets up .venv (once) and runs the default suite; `make test` sets up and runs the tests.
# Setup is idempotent: it reinstalls only when pyproject.toml changes.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.clsbench-installed
ARGS ?=

.PHONY: setup run test test-fast test-gpu lint clean mutation

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[timm,test,serve,onnx,triton,postgres]'
	touch $(STAMP)

# clsbench lives in $(VENV)/bin, not on PATH: say so after every run, whatever its exit status (which it keeps).
CALL_HINT := clsbench is installed in $(VENV)/bin, not on PATH: call $(VENV)/bin/clsbench, or run 'source $(VENV)/bin/activate' once per \
shell for a bare 'clsbench'

run: setup
	@$(VENV)/bin/clsbench run $(ARGS); status=$$?; echo; echo "$(CALL_HINT)"; exit $$status

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m "not slow"

test-gpu: setup
	$(PY) -m pytest -q -m gpu

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks

# Mutation testing of analysis/ and the server-QPS search (tools/mutation.toml; docs/development.md says how to read
# it). Installs the pinned mutmut into the venv on first use; MODULES="stats knee" limits it to some modules.
MODULES ?=
mutation: setup
	nice -n 10 $(PY) tools/mutation.py $(MODULES)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
