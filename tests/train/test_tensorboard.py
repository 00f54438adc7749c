"""--tensorboard: the event files hold metrics.jsonl's figures at their optimizer steps, and a missing package is
one line before any output."""

import json
import sys

import pytest

from lbscale.train.tensorboard import ScalarLog

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

BASE = ["--global-batch", "32", "--model", "test_resnet", "--quiet", "--device", "cpu", "--optimizer", "sgd",
        "--base-lr", "0.05"]  # tiny set: 560 train images, 17 steps per epoch


def _scalars(log_dir) -> dict[str, dict[int, float]]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def test_the_scalars_are_the_records_at_their_steps(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "tb"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "2", *BASE, "--eval-every", "5",
                         "--tensorboard")
    assert rc == 0, err
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in rows if "kind" not in r]
    steps = [r for r in rows if r.get("kind") == "step"]
    scalars = _scalars(out / "tensorboard")
    assert {"train/loss", "val/top1", "val/loss", "lr", "images_per_second", "time/data_seconds",
            "time/compute_seconds", "time/comm_seconds", "time/train_seconds"} <= set(scalars)
    assert [r["step"] for r in epochs] == [17, 34] and [r["step"] for r in steps] == [5, 10, 15, 20, 25, 30]
    # float32 in the event files
    assert scalars["train/loss"] == {r["step"]: pytest.approx(r["train_loss"], rel=1e-6) for r in epochs}
    assert scalars["lr"] == {r["step"]: pytest.approx(r["lr"], rel=1e-6) for r in epochs}
    assert scalars["time/train_seconds"] == {r["step"]: pytest.approx(r["train_seconds"], rel=1e-6) for r in epochs}
    # step and epoch evaluations of the whole split: one val/top1 curve on the step axis
    assert scalars["val/top1"] == {r["step"]: pytest.approx(r["val_top1"], rel=1e-6) for r in steps + epochs}


def test_records_to_tags():
    logged = []

    class Writer:
        def add_scalar(self, tag, value, global_step):
            logged.append((tag, value, global_step))

        def flush(self):
            pass

    log = ScalarLog()
    log.epoch({"epoch": 1, "step": 4})  # no writer (rank > 0, no --tensorboard): nothing, no error
    log.writer = Writer()
    log.epoch({"epoch": 1, "step": 4, "train_loss": 1.5, "test_top1": 0.5, "lr": 0.1, "gns_b_simple": 70.0,
               "compute_seconds": 2.0, "samples": 128, "partial": True, "images_per_second": None})
    log.step({"kind": "step", "step": 2, "epoch": 0.5, "val_f1_micro": 0.25, "subset": 40, "eval_seconds": 0.1})
    log.step({"kind": "step", "step": 3, "epoch": 0.75, "val_loss": 0.75, "subset": None})
    assert logged == [("train/loss", 1.5, 4), ("lr", 0.1, 4), ("time/compute_seconds", 2.0, 4),
                      ("gns_b_simple", 70.0, 4), ("test/top1", 0.5, 4),
                      ("val_subset/f1_micro", 0.25, 2), ("val/loss", 0.75, 3)]


def test_without_the_package_one_line_before_any_output(tiny_h5, tmp_path, run_cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` fails, find_spec finds nothing
    out = tmp_path / "none"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "1", *BASE, "--tensorboard")
    assert rc == 2
    assert err.strip().count("\n") == 0 and "the tensorboard package is not installed" in err
    assert not out.exists()


def test_a_resumed_trial_purges_the_steps_it_replays(tiny_h5, tmp_path, run_cli):
    # defect: a trial resumed from an older checkpoint (the process died after it) wrote the replayed steps again
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out = tmp_path / "tb"
    args = ["train", "--data", tiny_h5, "--out", out, "--epochs", "2", *BASE, "--eval-every", "5", "--tensorboard"]
    assert run_cli(*args, "--preempt-after-steps", "17")[0] == 75  # a checkpoint at step 17
    import shutil

    shutil.copytree(out / "checkpoint", tmp_path / "ck17")
    assert run_cli(*args, "--resume")[0] == 0  # steps 18..34 written
    shutil.rmtree(out / "checkpoint")  # as if the process had died after step 34 without a newer checkpoint
    shutil.copytree(tmp_path / "ck17", out / "checkpoint")
    (out / "summary.json").unlink()
    assert run_cli(*args, "--resume")[0] == 0  # steps 18..34 replayed
    files = sorted((out / "tensorboard").glob("events.out.tfevents.*"), key=lambda p: p.stat().st_mtime)
    assert len(files) == 3
    # the resumed writer starts with a session start at step 18: TensorBoard hides what the earlier files hold
    # from step 18 on (the first resume wrote no such marker: nothing was replayed then... it starts at 18 too)
    starts = [e.step for e in EventFileLoader(str(files[-1])).Load() if e.session_log.status == 1]  # START
    assert starts == [18]
    assert [e.step for e in EventFileLoader(str(files[0])).Load() if e.session_log.status == 1] == []
