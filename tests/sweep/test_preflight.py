"""Checks before launch: every data file of a plan is opened and checked against what its trials need before
the first trial starts; a problem is one line naming the spec field and the file, exit 2, nothing written and
no trial process started. The fail-fast seconds are printed (`pytest -s`), never asserted."""

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SPEC = """
name: first-day
data: {data}
model: test_resnet
epochs: 2
trial: {{optimizer: sgd, base_lr: 0.1, device: cpu{extra}}}
grid:
  batch: {batch}
  gpus: [1]
  seeds: 5
"""


@pytest.fixture(scope="module")
def no_val_h5(tmp_path_factory):
    """560 + 80 train samples, a test split, no val split."""
    from lbscale.data.prepare import prepare

    path = tmp_path_factory.mktemp("noval") / "noval.h5"
    prepare("synthetic", None, path, val_fraction=0.0, count=800, bands=3, size=16, classes=4, seed=3,
            command="test")
    return path


@pytest.fixture
def no_trial_process(monkeypatch):
    """Any attempt to start a trial process (or anything else) fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[0] if args else kwargs}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


def _spec(tmp_path, data, batch="32..512", extra=""):
    path = tmp_path / "x.yaml"
    path.write_text(SPEC.format(data=data, batch=batch, extra=extra))
    return path


def _timed(run_cli, *args):
    t0 = time.perf_counter()
    rc, out, err = run_cli(*args)
    seconds = time.perf_counter() - t0  # reported (pytest -s), never asserted
    print(f"\n{' '.join(map(str, args[2:]))}: exit {rc} in {seconds:.3f} s", file=sys.__stdout__)
    return rc, out, err


def _nothing_written(tmp_path):
    return sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_wrong_data_path_is_one_line_before_any_trial(tmp_path, run_cli, no_trial_process, dry_run):
    spec = _spec(tmp_path, "data/fm.h5")
    rc, out, err = _timed(run_cli, "sweep", spec, "--results", tmp_path / "res", *(["--dry-run"] if dry_run else []))
    assert (rc, out) == (2, "")
    assert err == (f"lbscale: error: {spec}: data: data/fm.h5: no such prepared file (write it with "
                   "lbscale prepare DATASET --out data/fm.h5)\n")
    assert _nothing_written(tmp_path)


def test_a_missing_dataset_of_the_grid_names_its_entry(tmp_path, run_cli, tiny_h5, no_trial_process):
    spec = tmp_path / "x.yaml"
    spec.write_text(SPEC.format(data=tiny_h5, batch="[32]", extra="").replace(f"data: {tiny_h5}\n", "")
                    + f"  datasets: {{full: {tiny_h5}, nf: {tmp_path / 'nf.h5'}}}\n")
    rc, out, err = _timed(run_cli, "sweep", spec, "--results", tmp_path / "res")
    assert (rc, out) == (2, "")
    assert err == (f"lbscale: error: {spec}: grid.datasets.nf: {tmp_path / 'nf.h5'}: no such prepared file (write "
                   f"it with lbscale prepare DATASET --out {tmp_path / 'nf.h5'})\n")
    assert _nothing_written(tmp_path)


def test_too_few_train_samples_for_the_largest_batch(tmp_path, run_cli, tiny_h5, no_trial_process):
    spec = _spec(tmp_path, tiny_h5, batch="32..1024")
    rc, out, err = _timed(run_cli, "sweep", spec, "--results", tmp_path / "res", "--dry-run")
    assert (rc, out) == (2, "")
    assert err == f"lbscale: error: {spec}: grid.batch 1024 on 1 GPU: the train split of {tiny_h5} has 560 samples\n"
    rc, out, err = _timed(run_cli, "sweep", spec, "--results", tmp_path / "res", "--batch", "1024")
    assert (rc, out) == (2, "")
    assert err == f"lbscale: error: {spec}: --batch 1024 on 1 GPU: the train split of {tiny_h5} has 560 samples\n"
    assert _nothing_written(tmp_path)


@pytest.mark.parametrize("where, value, field", [
    ("trial", 0.9, "trial: momentum"), ("variant", 0.9, "grid.variants.adam: momentum"),
    ("variant", 0.5, "grid.variants.adam: momentum"),  # away from the default: the same file and field
    ("shared", 0.9, "trial: momentum (variant adam)"),
])
def test_a_spec_option_the_optimizer_does_not_read_is_refused_at_any_value(tmp_path, run_cli, tiny_h5,
                                                                         no_trial_process, where, value, field):
    """momentum 0.9 (its default) beside a LAMB variant was planned without a word; LAMB never reads it."""
    spec = tmp_path / "x.yaml"
    text = SPEC.format(data=tiny_h5, batch="[32]", extra="")
    if where == "trial":
        text = text.replace("optimizer: sgd", f"optimizer: lamb, momentum: {value}")
    elif where == "variant":
        text += f"  variants: {{adam: {{optimizer: lamb, momentum: {value}}}}}\n"
    else:
        text = text.replace("optimizer: sgd", f"optimizer: sgd, momentum: {value}")
        text += "  variants: {sgd: {}, adam: {optimizer: lamb}}\n"
    spec.write_text(text)
    rc, out, err = _timed(run_cli, "sweep", spec, "--results", tmp_path / "res", "--dry-run")
    assert (rc, out) == (2, "") and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"lbscale: error: {spec}: {field}: lamb does not read it"), err
    assert _nothing_written(tmp_path)


def test_an_evaluation_split_the_options_need_is_missing(tmp_path, run_cli, no_val_h5, no_trial_process):
    spec = _spec(tmp_path, no_val_h5, batch="[32]", extra=", eval_every: 5")
    rc, out, err = _timed(run_cli, "sweep", spec, "--results", tmp_path / "res")
    assert (rc, out) == (2, "")
    assert err == (f"lbscale: error: {spec}: data: {no_val_h5}: no val split, and --eval-every evaluates it during "
                   "training; prepare the data with --val-fraction > 0, or evaluate test (--eval-split test)\n")
    assert _nothing_written(tmp_path)


def test_the_dry_run_shows_the_real_steps_and_ends_with_one_line(tmp_path, run_cli, tiny_h5):
    spec = _spec(tmp_path, tiny_h5, batch="32..512")
    rc, out, err = _timed(run_cli, "sweep", spec, "--results", tmp_path / "res", "--dry-run")
    assert rc == 0, err
    steps = {line.split()[0]: line.split()[-1] for line in out.splitlines() if line.startswith("b")}
    # drop: 560 // batch whole steps an epoch, 2 epochs
    assert steps == {f"b{b}-g1-sgd-linear-s{s}": str(560 // b * 2) for b in (32, 64, 128, 256, 512)
                     for s in range(5)}
    assert out.splitlines()[-1] == (f"25 trials planned; data checked ({tiny_h5}: 560 train samples); nothing run "
                                    "(--dry-run)")
    assert _nothing_written(tmp_path)


def test_no_function_in_the_sweep_package_is_over_60_lines():
    long = []
    for path in sorted((ROOT / "lbscale" / "sweep").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.name}:{node.name} {lines}")
    assert long == []


@pytest.mark.parametrize("grid, field", [
    ("  batch: [64]\n  local_batch: 48\n", "grid.batch 64"),
    ("  batch: 64..25\n", "grid.batch"),
    ("  points: [{batch: 100, gpus: 3}]\n", "grid.points[0]"),
    ("  batch: [64]\n  gpus: [0]\n", "grid.gpus"),
    ("  batch: [64]\n  local_batch: 0\n", "grid.local_batch"),  # was a ZeroDivisionError's traceback
    ("  points: [{batch: -64, gpus: 1}]\n", "grid.points[0].batch"),  # was trial b-64-g1-...
])
def test_a_grid_that_does_not_divide_names_the_spec_and_its_field(tmp_path, run_cli, tiny_h5, no_trial_process,
                                                                   grid, field):
    """'batch 64 is not divisible by 1 GPUs x local batch 48' and "malformed range '64..25'" named neither the
    spec file nor the field."""
    spec = tmp_path / "x.yaml"
    spec.write_text(f"name: g\ndata: {tiny_h5}\nmodel: test_resnet\nepochs: 1\ntrial: {{device: cpu}}\ngrid:\n{grid}")
    rc, out, err = _timed(run_cli, "sweep", spec, "--results", tmp_path / "res", "--dry-run")
    assert (rc, out) == (2, "") and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"lbscale: error: {spec}: {field}"), err
    assert _nothing_written(tmp_path)


@pytest.mark.parametrize("schedule, item", [("32@0,64@999st", "64@999st"), ("32@0,64@5000", "64@5000")])
def test_a_batch_schedule_arm_past_the_run_is_refused_before_launch(tmp_path, run_cli, tiny_h5, no_trial_process,
                                                                    schedule, item):
    """An arm whose change point lies past the run trained without the change, each of its trials on its own
    (issue 54, item 9); the sweep checks it with the data, as the trial does."""
    spec = _spec(tmp_path, tiny_h5, batch="[32]")
    spec.write_text(spec.read_text() + f"  batch_schedule: {{grow: \"{schedule}\"}}\n")
    rc, out, err = _timed(run_cli, "sweep", spec, "--results", tmp_path / "res", "--dry-run")
    assert (rc, out) == (2, "") and len(err.strip().splitlines()) == 1, err
    assert f"grid.batch_schedule.grow 32 on 1 GPU: --batch-schedule: {item} lies past the run (2 epochs, " in err
    assert _nothing_written(tmp_path)
