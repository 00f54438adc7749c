# The README's commands. Each target creates/refreshes the project venv when needed, so one command works
# on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
LBSCALE := $(VENV)/bin/lbscale
STAMP := $(VENV)/.installed-stamp
DEMO_DATA := data/demo.h5

.PHONY: venv horovod demo fashion-data demo-real schedule-demo schedule-real test test-gpu bench lint docs clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# The main job on the embedded default: prepare the synthetic set, show the sweep plan, run the tuned sweep
# (batch 16..512 x 6 searched learning rates, stopped at the target, pruned by successive halving, the two best
# points of each batch again; one process per trial, about 4 minutes on 2 cores), measure the gradient noise
# scale where each batch's best trial reached the target, show its status, report it (the tuned verdict first).
demo: venv
	mkdir -p data
	$(LBSCALE) prepare synthetic --out $(DEMO_DATA) --count 6000 --classes 10 --label-noise 0.2 --force
	$(LBSCALE) data info $(DEMO_DATA)
	$(LBSCALE) data check $(DEMO_DATA)
	$(LBSCALE) sweep experiments/demo-tuned.yaml --dry-run
	$(LBSCALE) sweep experiments/demo-tuned.yaml --quiet
	$(LBSCALE) gns results/demo-tuned --best --quiet
	$(LBSCALE) status results/demo-tuned
	$(LBSCALE) report results/demo-tuned --out reports/demo-tuned

# A first study on real data, designed by the tool (Zalando's Fashion-MNIST, Debian's dataset-fashion-mnist:
# installed where missing and possible, root with apt-get, else one line on how to get the four IDX files): a
# documented 3,000-image train subset; `lbscale design` (a pilot of at most 3 minutes measures the curve, the LR
# bowl, the pace and the evaluations' noise, and writes results/fashion-mnist-designed.yaml: target, batches, LR
# range, evaluations, pruning, epochs, each with its measured reason, and the 20-minute wall budget); the sweep it
# designed, with rounds until B_crit is resolved or the budget is spent; the noise scale at each batch's best
# trial where it reached the target; a branch study from the smallest batch's best trial there (the local critical
# batch); B_crit predicted at val_top1 0.84 (the study's best trial at its smallest batch trained on there, B_simple
# measured at both ends: `lbscale predict`); the report that sets the three estimates side by side, with the
# ladder of targets and the prediction.
FASHION_SRC ?= /usr/share/datasets/fashion-mnist
FASHION_DATA := data/fashion-mnist-3k.h5
FASHION_SPEC := results/fashion-mnist-designed.yaml
# where B_crit is predicted: the hand-designed study's target (B_crit 145 [102, 305] measured there)
FASHION_FOR ?= 0.84
fashion-data: venv
	@test -e $(FASHION_SRC)/train-images-idx3-ubyte.gz -o -e $(FASHION_SRC)/train-images-idx3-ubyte \
	  || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
	       && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 \
	            || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null; }; } } || true
	@test -e $(FASHION_SRC)/train-images-idx3-ubyte.gz -o -e $(FASHION_SRC)/train-images-idx3-ubyte \
	  || { echo "demo-real: no Fashion-MNIST IDX files in $(FASHION_SRC): install Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist, as root) or put the four files of Zalando Research's fashion-mnist release in a folder and run make demo-real FASHION_SRC=FOLDER" >&2; exit 2; }
	mkdir -p data
	test -e $(FASHION_DATA) || $(LBSCALE) prepare idx --src $(FASHION_SRC) --out $(FASHION_DATA) --val-fraction 0.025 --max-train 3000
	$(LBSCALE) data info $(FASHION_DATA)

demo-real: fashion-data
	$(LBSCALE) design $(FASHION_DATA) --model simple_cnn --wall 20m --for-target $(FASHION_FOR) --out $(FASHION_SPEC) --force
	$(LBSCALE) sweep $(FASHION_SPEC) --dry-run --estimate
	$(LBSCALE) sweep $(FASHION_SPEC) --until-resolved
	$(LBSCALE) gns results/fashion-mnist-designed --best --quiet
	$(LBSCALE) predict results/fashion-mnist-designed --at $(FASHION_FOR) --quiet
	$(LBSCALE) branch results/fashion-mnist-designed --batch $$($(PY) -c 'import sys, yaml; print(min(yaml.safe_load(open(sys.argv[1]))["design"]["samples_to_target"]))' $(FASHION_SPEC)) --at target --rule sqrt --quiet
	$(LBSCALE) report results/fashion-mnist-designed --out reports/fashion-mnist-designed

# From the critical batch to a batch-size schedule, checked by running it (docs/studies.md): on a tuned sweep's
# results (make demo's, make demo-real's; made first where missing), batch 32's best trial again with checkpoints
# kept at 1/8, 1/4, 1/2 of its steps to the target, the local critical batch there (branches, 3 repeats) and
# B_simple; the critical batch over training by the three methods (over-training.csv / .png), the schedule that
# follows the local critical batch, each batch at the sweep's tuned LR, and its check: the schedule, the best fixed
# batch, the schedule's last batch and its first, 3 seeds each, to the sweep's target, and the report's schedules
# table (with this machine's all-reduce fit: the time on GPUs that grow with the batch, modelled).
schedule-demo: venv
	test -d results/demo-tuned || $(MAKE) demo
	$(LBSCALE) schedule results/demo-tuned --batch 32 --quiet
	$(LBSCALE) sweep results/demo-tuned/schedule-b32/schedule.yaml --quiet
	$(LBSCALE) bench allreduce --procs 2 --sizes 4K..4M --repeats 5 --out data/allreduce-local.json --quiet
	$(LBSCALE) report results/demo-tuned-schedule-b32 --out reports/demo-tuned-schedule --allreduce data/allreduce-local.json

# On the hand-designed Fashion-MNIST study (experiments/fashion-mnist-tuned.yaml, made first where missing).
schedule-real: fashion-data
	test -d results/fashion-mnist-tuned || $(LBSCALE) sweep experiments/fashion-mnist-tuned.yaml --until-resolved --budget 80 --quiet
	$(LBSCALE) schedule results/fashion-mnist-tuned --batch 32 --quiet
	$(LBSCALE) sweep results/fashion-mnist-tuned/schedule-b32/schedule.yaml --quiet
	$(LBSCALE) bench allreduce --procs 2 --sizes 4K..4M --repeats 5 --out data/allreduce-local.json --quiet
	$(LBSCALE) report results/fashion-mnist-tuned-schedule-b32 --out reports/fashion-mnist-tuned-schedule \
	  --allreduce data/allreduce-local.json

test: venv
	$(PY) -m pytest -q

# Horovod 0.28.1, the optional second engine (--engine horovod): its sdist from the package index, the C++
# standard raised to what torch's headers need, built with Gloo (and NCCL where torch sees a GPU) into the venv;
# the wheel cached outside the checkout by torch version (scripts/install-horovod.sh; about 3 minutes on 2 cores).
horovod: venv
	bash scripts/install-horovod.sh $(PY)

# The GPU set (tests/gpu, marker gpu) on this machine's own torch / timm / h5py: the project on PYTHONPATH,
# nothing installed or fetched (the venv's python where there is one). Without a GPU every test skips.
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
test-gpu:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PY) -m pytest -q -rs -m gpu -p no:cacheprovider --log-level=WARNING \
	  --confcutdir=tests/gpu tests/gpu

bench: venv
	$(PY) benchmarks/run.py

lint: venv
	$(PY) -m ruff check lbscale tests benchmarks

# docs/cli.md from the Click commands (tests/test_cli_reference.py fails while it is out of date).
docs: venv
	$(PY) docs/make_cli_reference.py

clean:
	rm -rf $(VENV) data results/demo-tuned results/fashion-mnist-tuned results/fashion-mnist-designed results/fashion-mnist-designed-pilot results/fashion-mnist-designed.yaml results/demo-tuned-schedule-b32 results/fashion-mnist-tuned-schedule-b32 results/demo-sweep results/runs reports .pytest_cache
