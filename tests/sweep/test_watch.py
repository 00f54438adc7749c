"""Progress you can watch: the status table's time-left column against a hand computation from records the test
writes, `lbscale status --watch` until every trial has ended, the local sweep's plain progress lines in a log,
and the dry-run's --estimate (the sum by hand from its timings)."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest
import yaml

from lbscale.results import read_json, read_jsonl

NOW = 1_700_000_000.0


def _trial(results, name, batch, epochs, records=(), plan=None, summary=None, run=None, updated=None):
    d = results / name
    d.mkdir(parents=True)
    options = {"data": "/data/d.h5", "model": "test_resnet", "global_batch": batch, "epochs": epochs,
               "optimizer": "sgd", "out": str(d)}
    (d / "trial.yaml").write_text(yaml.safe_dump(options))
    (d / "grid.json").write_text(json.dumps({"trial": name, "global_batch": batch, "gpus": 1}))
    if plan:
        (d / "config.json").write_text(json.dumps({"config": options, "plan": plan, "task": "multiclass"}))
    if records:
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        os.utime(d / "metrics.jsonl", (updated, updated))
    if summary:
        (d / "summary.json").write_text(json.dumps(summary))
    if run:
        (d / "run.json").write_text(json.dumps(run))
    return d


def _study(tmp_path, pid):
    results = tmp_path / "res"
    # 320 samples an epoch: the estimates count samples (40 steps x 32 = 4 epochs x 320)
    plan = {"train_samples": 320, "steps_per_epoch": 10, "total_steps": 40, "epoch_samples": 320}
    _trial(results, "b32-g1-a", 32, 4, plan=plan, run={"host": socket.gethostname(), "pid": pid},
           records=[{"epoch": 1, "step": 10, "elapsed_seconds": 30.0, "val_top1": 0.5},
                    {"epoch": 2, "step": 20, "elapsed_seconds": 62.0, "val_top1": 0.6}], updated=NOW - 12)
    _trial(results, "b32-g1-b", 32, 4, plan=plan, summary={"status": "completed", "wall_seconds": 125.0},
           records=[{"epoch": 4, "step": 40, "elapsed_seconds": 120.0, "val_top1": 0.7}], updated=NOW - 500)
    _trial(results, "b32-g1-c", 32, 4)  # pending, the shape of a and b
    _trial(results, "b64-g1-d", 64, 2)  # pending, a shape not run yet
    return results


def test_the_time_left_column_by_hand(tmp_path, live_pid):
    from lbscale.sweep.command import status_table

    table = status_table(_study(tmp_path, live_pid), now=NOW).splitlines()
    rows = {line.split()[0]: line.split() for line in table[1:] if line.startswith("b")}
    assert table[0].split() == ["trial", "state", "epoch", "metric", "job", "elapsed", "left"]
    # a: its own pace, 62 s / 20 steps, for the 20 steps left, less the 12 s since its last record: 50 s
    assert rows["b32-g1-a"][1] == "running" and rows["b32-g1-a"][-1] == "0:00:50"
    assert rows["b32-g1-b"][-1] == "-"
    # c: 40 steps (320 samples / 32 x 4 epochs) at its shape's pace, (62 + 120) s / (20 + 40) steps: 121.3 s
    assert rows["b32-g1-c"][1] == "pending" and rows["b32-g1-c"][-1] == "0:02:01"
    # d: no trial of its shape yet: 10 steps x 64 samples at (62 + 120) s / (60 steps x 32 samples): 60.7 s
    assert rows["b64-g1-d"][-1] == "0:01:01"
    assert table[-2] == "time left: about 0:03:52 (1 running at its own pace, 2 to run at the pace of the trials run)"
    assert table[-1] == "4 trials: 1 completed, 2 pending, 1 running"


def test_status_watch_redraws_until_every_trial_has_ended(tmp_path, run_cli):
    results = tmp_path / "res"
    ends = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    threading.Thread(target=ends.wait, daemon=True).start()  # reaped once it ends, as a sweep reaps its trials
    plan = {"train_samples": 320, "steps_per_epoch": 10, "total_steps": 40}
    _trial(results, "b32-g1-a", 32, 4, plan=plan, run={"host": socket.gethostname(), "pid": ends.pid},
           records=[{"epoch": 1, "step": 10, "elapsed_seconds": 30.0, "val_top1": 0.5}], updated=time.time())
    _trial(results, "b32-g1-b", 32, 4, plan=plan, summary={"status": "completed"},
           records=[{"epoch": 4, "step": 40, "elapsed_seconds": 120.0, "val_top1": 0.7}], updated=time.time())
    rc, out, err = run_cli("status", results, "--watch", "0.2")
    assert rc == 0, err
    lines = out.splitlines()
    tables = [i for i, line in enumerate(lines) if line.split()[:2] == ["trial", "state"]]
    assert len(tables) >= 2  # drawn while it ran, and again once it had ended
    running = lines[tables[0]:tables[1]]
    assert any(line.startswith("b32-g1-a ") and " running " in line for line in running)
    assert lines[-1] == "2 trials: 1 completed, 1 interrupted"


def test_the_sweeps_estimate_by_hand():
    from lbscale.sweep.eta import TrialPace, sweep_left

    done = [TrialPace(("s32",), 32, steps=40, step=40, trained=120.0),
            TrialPace(("s32",), 32, steps=40, step=20, trained=62.0)]
    todo = [TrialPace(("s32",), 32, steps=40), TrialPace(("s64",), 64, steps=10)]
    # 40 x 182/60 + 10 x 64 x 182/(60 x 32) + 2 start-ups of 5 s
    assert sweep_left(done, todo, startup=5.0) == pytest.approx(40 * 182 / 60 + 640 * 182 / 1920 + 10)


def test_the_estimate_of_a_trial_by_hand():
    from lbscale.train.config import load_config
    from lbscale.sweep.estimate import timing_from, trial_seconds
    from lbscale.sweep.plan import SweepTrial
    from lbscale.train.plan import resolve_plan

    records = [{"kind": "step", "step": 5, "elapsed_seconds": 2.0, "eval_seconds": 0.5},
               {"kind": "step", "step": 10, "elapsed_seconds": 3.0, "eval_seconds": 0.3}]
    t = timing_from(records, wall=10.0, eval_samples=80)
    # between the records: 1 s for 5 steps; the median evaluation; the wall time beyond steps and evaluations, with
    # the first 5 steps' extra time (2 s where 5 x 0.2 s is the pace)
    assert (t.step_seconds, t.eval_seconds, t.startup, t.steps) == (pytest.approx(0.2), pytest.approx(0.4),
                                                                     pytest.approx(7.2), (5, 10))
    cfg = load_config(None, data="d.h5", out="o", global_batch=32, epochs=3, eval_every=4, eval_subset=40)
    p = SweepTrial("t", 1, 1, cfg, resolve_plan(cfg, 1, 560))  # 17 steps an epoch, 51 in all
    # start-up + 51 steps + 3 epoch evaluations + 51 // 4 = 12 step evaluations of 40 of the 80 samples
    assert trial_seconds(p, t) == pytest.approx(7.2 + 51 * 0.2 + 3 * 0.4 + 12 * 0.4 * 40 / 80)


def test_the_estimate_of_a_trial_whose_batch_grows_by_hand():
    """A batch schedule (32, then 64 from the second epoch) takes 17 + 9 + 9 = 35 steps instead of 51: its step
    evaluations (every 4 steps) are 35 // 4 = 8, and its training is priced at the first batch's seconds per sample
    over all its samples (51 steps' worth of 32 images at 0.2 s each), an upper bound where a larger batch takes
    fewer seconds per sample."""
    from lbscale.train.config import load_config
    from lbscale.sweep.estimate import ShapeTiming, trial_seconds
    from lbscale.sweep.plan import SweepTrial
    from lbscale.train.plan import resolve_plan

    t = ShapeTiming(step_seconds=0.2, eval_seconds=0.3, eval_samples=80, startup=6.2, steps=(5, 10))
    cfg = load_config(None, data="d.h5", out="o", global_batch=32, epochs=3, eval_every=4, eval_subset=40,
                      batch_schedule="32@0,64@1ep")
    p = SweepTrial("t", 1, 1, cfg, resolve_plan(cfg, 1, 560))
    assert trial_seconds(p, t) == pytest.approx(6.2 + 51 * 0.2 + 3 * 0.3 + 8 * 0.3 * 40 / 80)


def test_the_estimate_of_a_trial_with_geometric_evaluations_by_hand():
    """--eval-spacing 0.25 from step 2 over 51 steps evaluates at 2..8, 10, 12, 15, 18, 22, 27, 33, 41: 15 step
    evaluations, priced like any other."""
    from lbscale.train.config import load_config
    from lbscale.sweep.estimate import ShapeTiming, trial_seconds
    from lbscale.sweep.plan import SweepTrial
    from lbscale.train.plan import resolve_plan

    t = ShapeTiming(step_seconds=0.2, eval_seconds=0.3, eval_samples=80, startup=6.2, steps=(5, 10))
    cfg = load_config(None, data="d.h5", out="o", global_batch=32, epochs=3, eval_spacing=0.25, eval_first=2)
    p = SweepTrial("t", 1, 1, cfg, resolve_plan(cfg, 1, 560))
    assert trial_seconds(p, t) == pytest.approx(6.2 + 51 * 0.2 + 3 * 0.3 + 15 * 0.3)


@pytest.fixture
def child_env(monkeypatch):
    from tests.sweep.test_launch import _env

    for k, v in _env().items():
        monkeypatch.setenv(k, v)


def test_the_local_sweep_prints_progress_lines_in_a_log(tmp_path, run_cli, tiny_h5, child_env, monkeypatch):
    from lbscale import progress
    from lbscale.sweep import follow, launch
    from tests.sweep.test_launch import _spec

    monkeypatch.setattr(progress, "_QUIET", False)
    monkeypatch.setattr(follow, "LOG_EVERY", 0.0)  # a line at every new record it sees
    monkeypatch.setattr(launch, "FOLLOW_SECONDS", 0.1)
    results = tmp_path / "res"
    rc, out, err = run_cli("sweep", _spec(tmp_path, tiny_h5, epochs=3, gpus=1), "--results", results, "--batch",
                           "32", "--seeds", "1")
    assert rc == 0, out + err
    lines = [line for line in err.splitlines() if line.startswith("[1/1] b32-g1-lars-linear-s0: epoch")]
    assert lines and all(" left" in line and "\r" not in line for line in lines)
    # each line as the trial's records had it then: 560 train samples // 32 = 17 steps an epoch, 3 epochs
    records = {r["epoch"]: r for r in read_jsonl(results / "b32-g1-lars-linear-s0" / "metrics.jsonl")}
    for line in lines:
        epoch = int(line.split("epoch ")[1].split("/")[0])
        assert line.startswith(f"[1/1] b32-g1-lars-linear-s0: epoch {epoch}/3, step {17 * epoch}/51, "
                               f"val_top1 {records[epoch]['val_top1']:.4f}, about "), line
    assert read_json(results / "b32-g1-lars-linear-s0" / "summary.json")["status"] == "completed"


@pytest.mark.slow
def test_dry_run_estimate_times_each_shape_and_writes_nothing(tmp_path, run_cli, tiny_h5, child_env):
    from tests.sweep.test_launch import _spec

    results = tmp_path / "res"
    rc, out, err = run_cli("sweep", _spec(tmp_path, tiny_h5, epochs=3, gpus=1), "--results", results,
                           "--dry-run", "--estimate")
    assert rc == 0, err
    assert not results.exists()
    shapes = [line for line in out.splitlines() if line.startswith("shape ")]
    assert [s.split(":")[0] for s in shapes] == ["shape b32-g1 (2 trials)", "shape b64-g1 (2 trials)"]
    assert out.splitlines()[-1].startswith("expected duration: about ")


def test_a_batch_schedule_trials_steps_and_time_left_by_hand(tmp_path, live_pid):
    """A trial whose batch grows (32, then 64 from epoch 1, 128 from epoch 2) takes 10 + 5 + 3 + 3 = 21 steps
    over 4 epochs of 320 samples (128 does not divide 320: 4, 4 and 2 micro-batches of 32), not the 40 of its first
    batch; after 2 epochs (640 of 1,280 samples, 15 steps) in 50 s its own pace is per sample: 640 more samples
    at 50/640 s, less the 12 s since its last record."""
    from dataclasses import asdict

    from lbscale.train.config import load_config
    from lbscale.sweep.command import status_table
    from lbscale.sweep.follow import SweepProgress
    from lbscale.sweep.plan import SweepTrial
    from lbscale.sweep.state import trial_state
    from lbscale.train.plan import resolve_plan

    results = tmp_path / "res"
    out = results / "b32-g1-grow"
    cfg = load_config(None, data="/data/d.h5", out=str(out), model="test_resnet", global_batch=32, epochs=4,
                      optimizer="sgd", batch_schedule="32@0,64@1ep,128@2ep")
    plan = resolve_plan(cfg, 1, 320)
    assert plan.total_steps == 40  # the plan counts the first batch's steps
    d = _trial(results, "b32-g1-grow", 32, 4, plan=asdict(plan), run={"host": socket.gethostname(), "pid": live_pid},
               records=[{"epoch": 1, "step": 10, "samples": 320, "elapsed_seconds": 30.0, "val_top1": 0.5},
                        {"epoch": 2, "step": 15, "samples": 320, "elapsed_seconds": 50.0, "val_top1": 0.6}],
               updated=NOW - 12)
    config = json.loads((d / "config.json").read_text())
    config["config"]["batch_schedule"] = cfg.batch_schedule
    (d / "config.json").write_text(json.dumps(config))
    state = trial_state(d)
    assert (state["steps"], state["step"], state["seen"]) == (21, 15, 640)
    table = status_table(results, now=NOW).splitlines()
    assert table[1].split()[0] == "b32-g1-grow" and table[1].split()[-1] == "0:00:38"  # 640 x 50/640 - 12
    # a schedule whose batch falls below one step's samples: the trial refuses it; the count takes the plan's
    # (it once looped for ever)
    import signal

    def stuck(*_):
        raise TimeoutError("run_steps did not return")

    from lbscale.train.batch_schedule import run_steps

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(10)
    try:
        assert run_steps("32@0,16@1ep", 4, asdict(plan)) == 40
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    progress = SweepProgress()
    t, state = progress.pace(SweepTrial("b32-g1-grow", 1, 1, cfg, plan))
    assert progress.line(t, state, [], 12.0) == ("epoch 2/4, step 15/21, val_top1 0.6000, about 0:00:38 left; "
                                                 "sweep about 0:00:38 left")


def test_status_of_a_trial_made_by_lbscale_train(tiny_h5, tmp_path, run_cli):
    """`lbscale status OUT` on a trial that `lbscale train` made (no trial.yaml: no sweep) shows that trial; it said
    "no trials"."""
    out = tmp_path / "t"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--global-batch", "32", "--epochs", "1",
                         "--model", "test_resnet", "--device", "cpu", "--quiet")
    assert rc == 0, err
    rc, table, err = run_cli("status", out)
    assert rc == 0, err
    lines = table.strip().splitlines()
    assert lines[1].split()[:3] == ["t", "completed", "1/1"] and lines[-1] == "1 trials: 1 completed"
    rc, _, err = run_cli("status", tmp_path)  # a folder with neither: still one line
    assert rc == 2 and "no trials" in err
