# One place for the commands humans and CI share. `make run` and `make test` each do all set-up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUNS ?= runs

.PHONY: run examples test check setup lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls several GB of CUDA wheels
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

setup: $(VENV)/.installed

## Execute the quickstart notebook on the local backend; executed notebook, logs, plots -> runs/quickstart
run: setup
	$(PY) scripts/run_notebook.py notebooks/01-quickstart.ipynb --out $(RUNS)/quickstart

## Execute every example notebook (quickstart, DeepSpeed ZeRO-3, RDMA + gang dry run) -> runs/<name>
examples: setup
	for nb in notebooks/*.ipynb; do $(PY) scripts/run_notebook.py $$nb --out $(RUNS)/$$(basename $$nb .ipynb) || exit 1; done

## Lint, type-check and run every test
test: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" scripts/check

lint: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" scripts/check --lint-only

bench: setup
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(RUNS) .pytest_cache .mypy_cache .ruff_cache test-artifacts
