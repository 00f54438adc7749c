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
from tests.train.helpers import run_train, summary

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


def _gns(out) -> dict:
    return json.loads((out / "gns.json").read_text())


def test_gns_at_target_is_what_lbscale_gns_measures_on_a_checkpoint_there(tiny_h5, tmp_path, run_cli):
    """One process, stopped at its target at an epoch's end: the epoch's checkpoint holds the weights the noise
    scale was measured at, and `lbscale gns` on it (same seed, micro-batch, k and groups) gives the same record."""
    from lbscale.studies.gns import measure_trial

    out = tmp_path / "gns"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "3", *BASE, *AT_ONCE,
                         "--stop-at-target", "--gns-at-target", "--no-channels-last", "--seed", "4")
    assert rc == 0, err
    s, at = summary(out), _gns(out)
    assert (at["source"], at["step"], s["steps_to_target"]) == ("target", 17, 17)
    assert (at["micro_batch"], at["k"], at["groups"], at["seed"]) == (32, 8, 16, 4)  # local batch 32: micro 32
    assert torch.load(out / "checkpoint" / "model.pt", weights_only=False)["step"] == 17
    again = measure_trial(out, micro_batch=32, k=8, groups=16, seed=4)
    assert at["b_simple"] is not None and at["b_simple_lo"] is not None
    assert {k: v for k, v in at.items() if k != "source"} == {k: v for k, v in again.items() if k != "source"}


def test_gns_at_target_leaves_the_training_as_it_is(tiny_h5, tmp_path, run_cli):
    """Measured inside epoch 1 (the target met at step 5's evaluation) with dropout on: the weights, BatchNorm
    statistics and metrics of 2 epochs equal a trial's without it; the measurement is on micro-batches of 16 (the
    local batch, smaller than 32)."""
    args = ["--data", tiny_h5, "--epochs", "2", *BASE, "--local-batch", "16", "--eval-every", "5", *AT_ONCE,
            "--drop-rate", "0.3"]
    assert run_cli("train", *args, "--out", tmp_path / "with", "--gns-at-target")[0] == 0
    assert run_cli("train", *args, "--out", tmp_path / "without")[0] == 0
    with_, without = summary(tmp_path / "with"), summary(tmp_path / "without")
    assert with_["param_digests"] == without["param_digests"] and with_["steps"] == 34
    a, b = (torch.load(tmp_path / d / "checkpoint" / "model.pt", weights_only=False)["model"]
            for d in ("with", "without"))
    assert all(torch.equal(a[k], b[k]) for k in a)  # running statistics too
    assert with_["final"]["val_loss"] == without["final"]["val_loss"]
    at = _gns(tmp_path / "with")
    assert (at["source"], at["step"], at["micro_batch"], at["b_small"], at["b_big"]) == ("target", 5, 16, 16, 128)
    assert not (tmp_path / "without" / "gns.json").exists()


def test_a_trial_preempted_after_its_target_measures_the_noise_scale_once(tiny_h5, tmp_path, run_cli):
    args = ["--data", tiny_h5, "--epochs", "2", *BASE, "--eval-every", "5", *AT_ONCE, "--gns-at-target",
            "--check-every", "2"]
    assert run_cli("train", *args, "--out", tmp_path / "whole")[0] == 0
    cut = tmp_path / "cut"
    assert run_cli("train", *args, "--out", cut, "--preempt-after-steps", "8")[0] == 75
    assert _gns(cut) == _gns(tmp_path / "whole")  # measured at step 5, before the preemption
    (cut / "gns.json").unlink()
    assert run_cli("train", *args, "--out", cut, "--resume")[0] == 0
    assert not (cut / "gns.json").exists()  # the resumed trial had reached its target: not measured again
    assert summary(cut)["param_digests"] == summary(tmp_path / "whole")["param_digests"]


def test_a_trial_resumed_after_it_stopped_at_its_target_measures_nothing_again(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "killed"
    args = ["train", "--data", tiny_h5, "--out", out, "--epochs", "3", *BASE, *AT_ONCE, "--stop-at-target",
            "--gns-at-target"]
    assert run_cli(*args)[0] == 0
    first = summary(out)
    (out / "summary.json").unlink()  # killed between its target's checkpoint and its summary
    (out / "gns.json").unlink()
    assert run_cli(*args, "--resume")[0] == 0
    assert not (out / "gns.json").exists() and summary(out)["param_digests"] == first["param_digests"]


@pytest.mark.parametrize("args, needle", [
    (["--gns-at-target"], "--gns-at-target needs --target-metric and --target"),
])
def test_gns_at_target_needs_a_target(tiny_h5, tmp_path, run_cli, args, needle):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", *BASE, *args)
    assert rc == 2 and needle in err and not (tmp_path / "x").exists()


def test_a_sweep_spec_sets_gns_at_target(tmp_path):
    from lbscale.train.config import load_config

    path = tmp_path / "trial.yaml"
    path.write_text("data: x.h5\nout: o\ntarget_metric: val_top1\ntarget: 0.9\ngns_at_target: true\n")
    assert load_config(path).gns_at_target is True


@pytest.mark.slow
def test_gns_at_target_on_two_processes(tiny_h5, tmp_path):
    """Every rank measures the same weights alike (no collective inside), rank 0 writes gns.json: the trial ends
    with its ranks in step."""
    out = tmp_path / "ddp"
    r = run_train("--data", tiny_h5, "--out", out, "--epochs", "1", *BASE, "--eval-every", "5", *AT_ONCE,
                  "--gns-at-target", "--check-every", "2", nproc=2)
    assert r.returncode == 0, r.stderr[-3000:]
    s, g = summary(out), _gns(out)
    assert s["world_size"] == 2 and s["param_digests"][0] == s["param_digests"][1]
    assert (g["source"], g["step"], g["micro_batch"]) == ("target", 5, 16)  # local batch 16 on each of 2 ranks


def test_a_trial_stopped_at_its_target_inside_an_epoch_checkpoints_there(tiny_h5, tmp_path, run_cli):
    """Its checkpoint is the weights it stopped with (the same as one kept after that step), so `lbscale gns` and
    `lbscale branch --at target` measure and branch at the target's point; it checkpointed only at epochs' ends."""
    out = tmp_path / "stop"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "3", *BASE, "--eval-every", "3",
                         *AT_ONCE, "--stop-at-target", "--keep-checkpoints", "3st")
    assert rc == 0, err
    assert summary(out)["steps_to_target"] == 3
    info = json.loads((out / "checkpoint" / "info.json").read_text())
    assert (info["reason"], info["step"], info["samples_seen"]) == ("target", 3, 3 * 32)
    kept = torch.load(out / "kept" / "3st" / "model.pt", weights_only=False)["model"]
    final = torch.load(out / "checkpoint" / "model.pt", weights_only=False)["model"]
    assert all(torch.equal(kept[k], final[k]) for k in kept)
