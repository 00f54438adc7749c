"""What a trial does where it reaches its target, besides the evaluation that reached it: a trial that stops there
evaluates the test split once (its summary's `test`), and `--gns-at-target` measures the gradient noise scale at
those weights into gns.json. Expected values come another way: the test split evaluated here on the weights of a
checkpoint taken at the target, `lbscale gns` (measure_trial) on that checkpoint, and a trial without the option."""

import json

import pytest
import torch
import torch.nn.functional as F

from lbscale.data.formats import open_prepared
from lbscale.data.loader import ShardedLoader
from lbscale.data.transforms import Normalize
from lbscale.train.models import build_model
from tests.train.helpers import summary

BASE = ["--global-batch", "32", "--model", "test_resnet", "--quiet", "--device", "cpu", "--optimizer", "sgd",
        "--base-lr", "0.05"]  # tiny set: 560 train, 80 val, 160 test images; 17 steps per epoch
AT_ONCE = ["--target-metric", "val_loss", "--target", "1e9"]  # met by the first evaluation


def _rows(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _test_split(data, weights: dict) -> dict:
    """test_top1 and test_loss of `weights` (a test_resnet's state), evaluated here in one batch."""
    f = open_prepared(data)
    model = build_model("test_resnet", len(f.band_names), f.num_classes, channels_last=False)
    model.load_state_dict(weights)
    model.eval()
    (batch,) = list(ShardedLoader(f, "test", local_batch=f.size("test"), drop_last=False, even=False))
    with torch.no_grad():
        logits = model(Normalize(f.mean, f.std, torch.device("cpu"))(batch.images))
    y = batch.labels.long()
    return {"test_top1": float((logits.argmax(1) == y).float().mean()), "test_loss": float(F.cross_entropy(logits, y))}


def _figures(test: dict) -> dict:
    return {k: test[k] for k in ("test_top1", "test_loss")}


def test_a_trial_stopped_at_its_target_inside_an_epoch_evaluates_the_test_split_there(tiny_h5, tmp_path, run_cli):
    # the report's winners showed 'Final Accuracy (test)' as '-': a trial stopped at its target had no test figures.
    # The target is met at step 3's evaluation; the checkpoint kept after step 3 holds the weights it stopped with
    out = tmp_path / "stop"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "3", *BASE, "--eval-every", "3",
                         *AT_ONCE, "--stop-at-target", "--keep-checkpoints", "3st")
    assert rc == 0, err
    s = summary(out)
    assert s["stopped"] == "target" and s["steps"] == 3
    kept = torch.load(out / "kept" / "3st" / "model.pt", weights_only=False)
    assert kept["step"] == 3
    expected = _test_split(tiny_h5, kept["model"])
    assert s["test"] is not None, "no test figures for a trial stopped at its target"
    assert _figures(s["test"]) == pytest.approx(expected, rel=1e-5)
    # once, after the trial's last record: its training time and pace are its records', as before
    rows = _rows(out)
    assert not any(k.startswith("test_") for r in rows for k in r)
    assert s["total_train_seconds"] == pytest.approx(sum(r["train_seconds"] for r in rows if r.get("kind") != "step"))


def test_a_trial_stopped_at_its_target_at_an_epochs_end_evaluates_the_test_split_there(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "edge"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "3", *BASE, *AT_ONCE,
                         "--stop-at-target")
    assert rc == 0, err
    s = summary(out)
    assert s["stopped"] == "target" and s["steps"] == 17 and s["epochs_completed"] == 1
    saved = torch.load(out / "checkpoint" / "model.pt", weights_only=False)
    assert saved["step"] == 17  # the epoch's checkpoint: the weights the trial stopped with
    assert _figures(s["test"]) == pytest.approx(_test_split(tiny_h5, saved["model"]), rel=1e-5)


def test_a_target_on_the_test_split_takes_the_test_figures_of_the_evaluation_that_reached_it(tiny_h5, tmp_path,
                                                                                               run_cli):
    # test is the target's own split: the evaluation at the target is the test figure, no second pass
    out = tmp_path / "own"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "3", *BASE, "--eval-every", "3",
                         "--eval-split", "test", "--target-metric", "test_loss", "--target", "1e9", "--stop-at-target")
    assert rc == 0, err
    s = summary(out)
    at = [r for r in _rows(out) if r.get("kind") == "step"]
    assert len(at) == 1 and s["final"] == at[0]
    assert s["test"] == {k: v for k, v in at[0].items() if k.startswith("test_")} and "test_top1" in s["test"]


def test_a_trial_killed_after_its_target_checkpoint_resumes_to_its_end_there(tiny_h5, tmp_path, run_cli):
    # stopped at its target at an epoch's end, a trial checkpoints that epoch, then writes its summary: killed in
    # between, its resume trained on to the next evaluation (another epoch) and ended with other weights
    out = tmp_path / "killed"
    args = ["train", "--data", tiny_h5, "--out", out, "--epochs", "3", *BASE, *AT_ONCE, "--stop-at-target"]
    assert run_cli(*args)[0] == 0
    first = summary(out)
    (out / "summary.json").unlink()  # as if killed before writing it
    rc, _, err = run_cli(*args, "--resume")
    assert rc == 0, err
    again = summary(out)
    assert (again["steps"], again["stopped"], again["steps_to_target"]) == (17, "target", 17)
    assert again["param_digests"] == first["param_digests"] and again["final"] == first["final"]
    assert again["test"] == first["test"]  # evaluated once, by the process that wrote the summary
