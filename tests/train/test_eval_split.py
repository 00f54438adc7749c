"""`--eval-split val|test` and the final test evaluation: train on the whole train split, report test figures."""

import json

import pytest

from lbscale.data.prepare import prepare
from lbscale.report import load_results
from lbscale.report.tables import per_epoch
from tests.train.helpers import summary

COMMON = ["--model", "test_resnet", "--quiet", "--check-every", "2", "--device", "cpu", "--global-batch", "32",
          "--optimizer", "lamb", "--base-lr", "0.004", "--lr-scaling", "none", "--epochs", "2",
          "--warmup-epochs", "0.5"]


def _records(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_default_evaluates_val_each_epoch_and_test_once_at_the_end(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "t"
    rc, stdout, err = run_cli("train", "--data", tiny_h5, "--out", out, *COMMON)
    assert rc == 0, err
    assert all("val_top1" in r and "test_top1" not in r for r in _records(out))
    s = summary(out)
    assert s["eval_split"] == "val"
    assert set(s["test"]) == {"test_top1", "test_loss"} and 0 <= s["test"]["test_top1"] <= 1
    assert "test_top1" in stdout.splitlines()[-1]  # the outcome line shows the paper's split
    rc, _, err = run_cli("report", out, "--out", tmp_path / "rep", "--format", "md,csv")
    assert rc == 0, err
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "Accuracy (test)" in md and "Loss (test)" in md  # the test figures, and the table says so
    assert (tmp_path / "rep" / "figures" / "training-curves.png").exists()
    assert per_epoch(load_results([out]), "test_top1") == "val_top1"  # curves: the per-epoch val figures


def test_full_train_split_with_test_evaluation(tmp_path, run_cli):
    data = tmp_path / "notval.h5"
    prepare("synthetic", None, data, count=800, bands=3, size=16, classes=4, seed=3, val_fraction=0,
            command="test")
    out = tmp_path / "t"
    rc, stdout, err = run_cli("train", "--data", data, "--out", out, "--eval-split", "test",
                              "--target-metric", "test_top1", "--target", "0.3", *COMMON)
    assert rc == 0, err
    records = _records(out)
    assert all("test_top1" in r and "test_loss" in r and "val_top1" not in r for r in records)
    s = summary(out)
    assert s["eval_split"] == "test" and s["test"]["test_top1"] == records[-1]["test_top1"]
    assert s["final"]["test_top1"] == records[-1]["test_top1"] and "test_top1" in s["best"]
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["primary_metric"] == "test_top1" and cfg["plan"]["train_samples"] == 640  # 80% of 800: all of train
    assert "test_top1" in stdout.splitlines()[-1]
    study = load_results([out])
    assert study.trials["final_test_top1"].iloc[0] == records[-1]["test_top1"]


def test_test_split_missing_is_refused_before_any_output(tmp_path, run_cli):
    data = tmp_path / "notest.h5"
    prepare("synthetic", None, data, count=400, bands=3, size=16, classes=4, seed=3, test_fraction=0,
            command="test")
    out = tmp_path / "t"
    rc, _, err = run_cli("train", "--data", data, "--out", out, "--eval-split", "test", *COMMON)
    assert rc == 2 and "no test split" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_target_metric_must_be_of_the_evaluated_split(tiny_h5, tmp_path, run_cli):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "t", "--eval-split", "test",
                         "--target-metric", "val_top1", "--target", "0.5", *COMMON)
    assert rc == 2 and "test_top1" in err and not (tmp_path / "t").exists()


@pytest.mark.parametrize("options, needs", [
    (["--prune", "asha", "--prune-min-steps", "4", "--prune-group", "g", "--target-metric", "val_top1",
      "--target", "0.5", "--stop-at-target"], "--prune"),
    (["--eval-every", "4"], "--eval-every"),
    (["--eval-every-samples", "100"], "--eval-every-samples"),
    (["--target-metric", "val_top1", "--target", "0.5"], "--target-metric val_top1"),
])
def test_options_that_need_a_val_split_are_refused_on_a_file_without_one(tmp_path, run_cli, options, needs):
    # defect: pruning on a file without val evaluated nothing, saw NaN at every rung and pruned every trial
    # ("trial pruned: at rung 1 (... val_top1 nan, kept 1 of 1)"), exit 0
    data = tmp_path / "noval.h5"
    prepare("synthetic", None, data, count=400, bands=3, size=16, classes=4, seed=3, val_fraction=0,
            command="test")
    out = tmp_path / "t"
    rc, _, err = run_cli("train", "--data", data, "--out", out, *COMMON, *options)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert needs in err and "no val split" in err and str(data) in err
    assert not out.exists()
