# The README's commands. Each target creates/refreshes the project venv when needed, so one command works
# on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LBSCALE := $(VENV)/bin/lbscale
STAMP := $(VENV)/.installed-stamp
DEMO_DATA := data/demo.h5

.PHONY: venv demo test bench lint clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The main job on the embedded default: prepare the synthetic set, show the sweep plan, run the tuned sweep
# (batch 32..512 x 6 searched learning rates, stopped at the target, pruned by successive halving; one process
# per trial, a few minutes on 2 cores), show its status, report it (the tuned verdict first).
demo: venv
	mkdir -p data
	$(LBSCALE) prepare synthetic --out $(DEMO_DATA) --count 6000 --label-noise 0.05 --force
	$(LBSCALE) data info $(DEMO_DATA)
	$(LBSCALE) data check $(DEMO_DATA)
	$(LBSCALE) sweep experiments/demo-tuned.yaml --dry-run
	$(LBSCALE) sweep experiments/demo-tuned.yaml --quiet
	$(LBSCALE) status results/demo-tuned
	$(LBSCALE) report results/demo-tuned --out reports/demo-tuned

test: venv
	$(PY) -m pytest -q

bench: venv
	$(PY) benchmarks/run.py

lint: venv
	$(PY) -m ruff check lbscale tests benchmarks

clean:
	rm -rf $(VENV) data results/demo-tuned results/demo-sweep results/runs reports .pytest_cache
