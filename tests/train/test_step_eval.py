"""Evaluation inside an epoch: step records beside the epoch records, a fixed evaluation subset, steps to target
at step resolution, stopping at the target, and evaluation time kept out of training time."""

import json

import numpy as np
import pytest

from lbscale.data.loader import ShardedLoader
from tests.train.helpers import summary

BASE = ["--global-batch", "32", "--model", "test_resnet", "--quiet", "--device", "cpu", "--optimizer", "sgd",
        "--base-lr", "0.05"]  # tiny set: 560 train images, 17 steps per epoch


def _rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_the_evaluation_subset_is_fixed_and_split_across_ranks(tiny_h5):
    whole = ShardedLoader(tiny_h5, "val", local_batch=16, subset=30, even=False, drop_last=False)
    again = ShardedLoader(tiny_h5, "val", local_batch=7, subset=30, even=False, drop_last=False, seed=9)
    first = whole.indices(epoch=0)
    assert len(first) == 30 == len(set(first.tolist())) and first.max() < 80
    assert np.array_equal(first, whole.indices(epoch=5)) and np.array_equal(first, again.indices())
    shards = [ShardedLoader(tiny_h5, "val", rank=r, world_size=2, local_batch=4, subset=30, even=False,
                            drop_last=False).indices() for r in range(2)]
    assert sorted(np.concatenate(shards).tolist()) == sorted(first.tolist())
    assert sum(len(b.labels) for b in whole) == 30


def test_step_records_and_steps_to_target_at_step_resolution(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "steps"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "2", *BASE, "--eval-every", "5",
                         "--eval-subset", "40", "--target-metric", "val_top1", "--target", "0.0")
    assert rc == 0, err
    rows = _rows(out)
    steps = [r for r in rows if r.get("kind") == "step"]
    epochs = [r for r in rows if "kind" not in r]
    assert [r["step"] for r in steps] == [5, 10, 15, 20, 25, 30]
    assert [r["epoch"] for r in steps] == pytest.approx([5 / 17, 10 / 17, 15 / 17, 1 + 3 / 17, 1 + 8 / 17,
                                                         1 + 13 / 17])
    assert all(r["subset"] == 40 for r in steps) and [r["samples"] for r in steps] == [32 * r["step"] for r in steps]
    assert [r["epoch"] for r in epochs] == [1, 2]
    # elapsed: training + epoch evaluations before it, the step evaluations' own time left out
    assert epochs[0]["elapsed_seconds"] == pytest.approx(epochs[0]["train_seconds"] + epochs[0]["eval_seconds"])
    assert epochs[1]["elapsed_seconds"] == pytest.approx(epochs[0]["elapsed_seconds"] + epochs[1]["train_seconds"]
                                                         + epochs[1]["eval_seconds"])
    assert epochs[0]["elapsed_seconds"] < steps[3]["elapsed_seconds"] < epochs[1]["elapsed_seconds"]
    assert epochs[0]["step_eval_seconds"] > 0
    s = summary(out)  # the first evaluation at or past the target: step 5's
    assert (s["steps_to_target"], s["epochs_to_target"]) == (5, pytest.approx(5 / 17))
    assert s["seconds_to_target"] == steps[0]["elapsed_seconds"] and s["epochs_completed"] == 2


def test_stop_at_target_ends_the_trial_completed(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "stop"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "3", *BASE, "--eval-every", "3",
                         "--target-metric", "val_loss", "--target", "1e9", "--stop-at-target")
    assert rc == 0, err
    s = summary(out)
    assert s["status"] == "completed" and s["stopped"] == "target" and s["steps"] == 3 == s["steps_to_target"]
    rows = _rows(out)
    assert [r.get("kind") for r in rows] == ["step", None] and rows[1]["partial"] and rows[0]["subset"] is None
    assert run_cli("train", "--data", tiny_h5, "--out", out, "--resume", *BASE)[0] == 0  # nothing left to do
    assert summary(out)["steps"] == 3


def test_evaluation_every_so_many_samples(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "samples"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "1", *BASE,
                         "--eval-every-samples", "100", "--eval-batch", "64")
    assert rc == 0, err
    steps = [r["step"] for r in _rows(out) if r.get("kind") == "step"]
    assert steps == [s for s in range(1, 18) if 32 * s // 100 > 32 * (s - 1) // 100] == [4, 7, 10, 13, 16]


def test_a_stop_on_the_epochs_last_step_records_the_whole_epoch(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "edge"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "3", *BASE, "--eval-every", "17",
                         "--target-metric", "val_loss", "--target", "1e9", "--stop-at-target")
    assert rc == 0, err
    rows = _rows(out)  # 17 steps per epoch: the target is met at the last step of epoch 1
    assert [(r.get("kind"), r["step"], r.get("partial", False)) for r in rows] == [("step", 17, False),
                                                                                 (None, 17, False)]
    s = summary(out)
    assert s["epochs_completed"] == 1 and s["partial_epoch"] is None and s["stopped"] == "target"
    assert s["steps_to_target"] == 17 and s["epochs_to_target"] == pytest.approx(1.0)
