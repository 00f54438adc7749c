"""`lbscale design` end to end on the tiny set: a pilot through the normal trial path, kept and reused; a spec
whose every choice carries its reason, that `sweep` plans; the same inputs give the same bytes; and bad input is
one line and exit 2 before anything runs."""

import json
import shutil

import pytest

import yaml

from lbscale.results import read_json
from tests.sweep.test_launch import lbscale


def test_design_writes_a_spec_the_sweep_plans_and_a_rerun_writes_it_again_byte_for_byte(tiny_h5, tmp_path):
    out, results = tmp_path / "mine.yaml", tmp_path / "results" / "mine"
    # an hour: room for the pilot on a busy machine (it takes at most 6 min of it, 12 epochs a trial at most)
    args = ("design", tiny_h5, "--model", "simple_cnn", "--wall", "60m", "--out", out, "--results", results)
    first = lbscale(*args)
    last = first.stdout.strip().splitlines()[-1]
    assert last.startswith(f"design: wrote {out}: target val_top1 ") and "next: lbscale sweep" in last
    pilot = tmp_path / "results" / "mine-pilot"
    record = read_json(pilot / "pilot.json")
    # at most max(10% of the budget, 3 min): 6 min: what it recorded as used, and the trials it kept
    assert 0 < record["seconds"] <= 360 * 1.1 and record["epochs"] >= 1
    trials = sorted(d.name for d in pilot.iterdir() if (d / "summary.json").exists())
    assert len(trials) >= 6
    assert all(read_json(pilot / t / "summary.json")["status"] in ("completed", "diverged") for t in trials)
    text = out.read_text()
    spec = yaml.safe_load(text)
    chosen = ("target", "lr_scaling", "eval_spacing", "eval_subset", "eval_first", "prune")
    for key in chosen:  # every choice carries its measured reason
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{key}:"))
        assert "  # " in line, line
    assert spec["wall"] == "60m" and spec["design"]["pilot_seconds"] == record["seconds"]
    ladder = spec["trial"]["target"]  # the study's own target last, a ladder of four below it
    assert len(ladder) == 5 and ladder == sorted(ladder) and 0.1 < ladder[0] and ladder[-1] < 1
    assert spec["grid"]["search"]["trials"] in (4, 6)
    # where the real run ends (the pilot's plateau by default), and the reference run's time set aside for it
    assert spec["design"]["for_target"] > ladder[-1] and spec["design"]["reserved_seconds"] > 0
    lo, hi = spec["grid"]["search"]["base_lr"]["loguniform"]
    assert hi / lo >= 16
    # each batch its own epochs (3x its predicted samples to the target, at least 2), and the pilot's LR bowl that
    # --estimate prices each search point by
    batches = spec["design"]["samples_to_target"]
    assert set(spec["epochs"]) == set(batches) and all(e >= 2 for e in spec["epochs"].values())
    assert spec["design"]["bowl_lr"] > 0 and 1 in spec["design"]["bowl"].values()
    # the pace priced at the smallest batch it may choose (8) as well as at the pilot's two (16 and 64 here)
    assert record["small"]["batch"] == 8 and record["small"]["step_seconds"] > 0
    assert set(spec["design"]["seconds_per_sample"]) == {8, record["mid"], record["largest"]}
    plan = lbscale("sweep", out, "--results", results, "--dry-run").stdout
    assert "trials planned" in plan
    # the same inputs: the kept pilot is reused (nothing trained again) and the spec is the same bytes
    again = lbscale(*args, "--force").stdout
    assert "completed" not in again and out.read_text() == text
    # a pilot kept from before the smallest batch was timed: timed once, then kept
    old = {k: v for k, v in record.items() if k != "small"}
    (pilot / "pilot.json").write_text(json.dumps(old))
    lbscale(*args, "--force")
    assert read_json(pilot / "pilot.json")["small"]["batch"] == 8
    # --out over an existing spec needs --force
    refused = lbscale(*args, check=False)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "--force" in refused.stderr
    # other inputs with the kept pilot: one line, nothing run
    shutil.copy(out, tmp_path / "kept.yaml")
    other = lbscale("design", tiny_h5, "--model", "simple_cnn", "--wall", "70m", "--out", tmp_path / "b.yaml",
                    "--results", results, check=False)
    assert other.returncode == 2 and "wall" in other.stderr and "--fresh" in other.stderr, other.stderr
    assert not (tmp_path / "b.yaml").exists()


def test_bad_input_is_one_line_before_anything_runs(tiny_h5, tmp_path):
    import json

    from lbscale.data.prepare import prepare

    no_val = tmp_path / "noval.h5"
    prepare("synthetic", None, no_val, count=200, bands=3, size=16, classes=4, seed=3, command="test",
            val_fraction=0.0)
    other = tmp_path / "other"  # a finished sweep of another name
    (other / "b16-g1-s0").mkdir(parents=True)
    (other / "b16-g1-s0" / "grid.json").write_text(json.dumps({"sweep": "someone-else", "global_batch": 16}))
    cases = [
        ((no_val, "--wall", "10m"), "no val split"),
        ((tiny_h5, "--wall", "4m"), "too small for a pilot"),
        ((tiny_h5, "--wall", "10"), "wall-clock time with its unit"),
        ((tiny_h5, "--wall", "10000000d"), "more than a year"),
        ((tiny_h5, "--wall", "10m", "--metric", "val_loss"), "higher is better"),
        ((tiny_h5, "--wall", "10m", "--metric", "val_f1_micro"), "--metric"),
        ((tmp_path / "missing.h5", "--wall", "10m"), "no such prepared file"),
        ((tiny_h5, "--wall", "10m", "--target", "0.2"), "--target 0.2: at or below chance"),
        ((tiny_h5, "--wall", "10m", "--lr", "-1"), "--lr -1: the pilot's middle learning rate must be a number > 0"),
        ((tiny_h5, "--wall", "10m", "--model", "nosuchnet"), "--model: 'nosuchnet' is not a timm model"),
        ((tiny_h5, "--wall", "10m", "--model", "vit_tiny_patch16_224"),
         "--model vit_tiny_patch16_224: does not run on this data's 3 x 16 x 16 images"),
        ((tiny_h5, "--wall", "10m", "--results", other), "holds the trials of sweep 'someone-else'"),
        ((tiny_h5, "--wall", "10m", "--out", "/sys/lbscale-design/spec.yaml"), "cannot write in /sys"),
    ]
    for args, words in cases:
        out = tmp_path / "x.yaml"
        extra = [] if "--out" in args else ["--out", out]
        results = [] if "--results" in args else ["--results", tmp_path / "r"]
        model = [] if "--model" in args else ["--model", "simple_cnn"]
        r = lbscale("design", *args[:1], *model, *args[1:], *extra, *results, check=False)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, (args, r.stderr)
        assert not out.exists() and not (tmp_path / "r-pilot").exists() and not (tmp_path / "other-pilot").exists()


def test_a_timing_run_that_fails_is_named_as_the_pilots_and_leaves_no_pilot_behind(tmp_path, run_cli):
    """A corrupt images chunk said '--estimate: trial timing did not run here' (the user gave no --estimate) and
    left a -pilot folder."""
    import h5py
    import numpy as np

    data = tmp_path / "f.h5"
    rc, _, err = run_cli("prepare", "synthetic", "--out", data, "--count", "600", "--size", "64")
    assert rc == 0, err
    with h5py.File(data, "r") as h:
        info = h["/train/images"].id.get_chunk_info(0)
    with open(data, "r+b") as f:
        f.seek(info.byte_offset + info.size // 2 - 32768)
        f.write(np.random.default_rng(0).bytes(65536))
    r = lbscale("design", data, "--model", "simple_cnn", "--wall", "20m", "--out", tmp_path / "s.yaml",
                "--results", tmp_path / "r", check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "design: the pilot's timing run at batch 8 did not run here" in r.stderr and "checksum" in r.stderr
    assert not (tmp_path / "r-pilot").exists() and not (tmp_path / "s.yaml").exists()


def test_a_second_design_on_the_same_results_is_refused_before_it_touches_the_pilot(tiny_h5, tmp_path):
    """The second design was refused only after it had written pilot.json with its own plan, and its line
    suggested --wait-for-lock, which design does not take."""
    import os
    import socket

    from lbscale.sweep.lock import LOCK

    folder = tmp_path / "r-pilot"
    folder.mkdir()
    holder = {"host": socket.gethostname(), "pid": os.getppid(), "started": "now", "command": "lbscale design ..."}
    (folder / LOCK).write_text(json.dumps(holder))
    r = lbscale("design", tiny_h5, "--model", "simple_cnn", "--wall", "30m", "--out", tmp_path / "s.yaml",
                "--results", tmp_path / "r", check=False)
    assert r.returncode == 2 and "another `lbscale design` measures its pilot there" in r.stderr, r.stderr
    assert "--wait-for-lock" not in r.stderr and r.stderr.count("\n") == 1
    assert sorted(p.name for p in folder.iterdir()) == [LOCK]


def test_a_trial_trained_on_from_its_checkpoint_is_the_longer_trial(tiny_h5, tmp_path):
    from lbscale.analysis.pilot import PilotRecord, Step, Timing
    from lbscale.studies.design import DesignOptions, check_inputs
    from lbscale.studies.pilot_run import PilotRun

    o = DesignOptions(data=tiny_h5, model="simple_cnn", wall="60m", out=tmp_path / "x.yaml")
    facts = check_inputs(o, 3600.0)

    def run(folder):
        folder.mkdir()
        r = PilotRun(o, facts, folder, 3600.0)
        r.record = PilotRecord({}, 32, 64, 0.05, 2, 2, Timing(0.01, 0.1, 80, 1.0), "here")
        return r

    p, q = run(tmp_path / "p"), run(tmp_path / "q")
    (short,) = p.stage(Step("mid", 32, (0.05,), 2))
    ((_, longer),) = p.stage(Step("long", 32, (0.05,), 4))
    (direct,) = q.stage(Step("mid", 32, (0.05,), 4))
    # the same values at the same sample counts as a 4-epoch trial from the start; its first half the 2-epoch one's
    assert longer == direct[1] and len(longer) == 2 * len(short[1]) and longer[:len(short[1])] == short[1]
    assert p.record.stage_seconds["long"] > 0 and (tmp_path / "p" / "b32-lr0.05-e4" / "summary.json").exists()
    used = p.record.seconds
    # kept: nothing trained, nothing spent
    assert p.stage(Step("long", 32, (0.05,), 4)) == [(0.05, longer)] and p.record.seconds == used
    assert not any(p.name.endswith(".part") for p in (tmp_path / "p").iterdir())


def test_chance_is_the_val_splits_commonest_class_and_a_target_at_or_below_it_is_refused(tmp_path):
    """A 2-class val split that is 90% one class had chance 1 / 2: pilot curves starting at the majority rate
    'reached' a target of 0.886 at their first evaluation. Now chance is the commonest class's share, and a
    --target at or below it is one line before anything runs."""
    import numpy as np

    from lbscale.data.prepare import prepare
    from lbscale.errors import LbscaleError
    from lbscale.studies.design import DesignOptions, check_inputs

    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.integers(0, 255, size=(400, 8, 8, 3), dtype=np.uint8))
    np.save(tmp_path / "y.npy", (rng.random(400) < 0.1).astype(np.int64))  # about 90% class 0
    data = tmp_path / "skewed.h5"
    prepare("arrays", None, data, val_fraction=0.25, seed=1, images=f"{tmp_path}/x.npy",
            labels=f"{tmp_path}/y.npy", layout="NHWC")
    from lbscale.data.formats import open_prepared

    with open_prepared(data) as f:
        share = float(np.bincount(f.labels("val")).max() / f.size("val"))
    assert share > 0.85
    o = DesignOptions(data=data, model="simple_cnn", wall="20m", out=tmp_path / "s.yaml")
    assert check_inputs(o, 1200.0).chance == pytest.approx(share)
    with pytest.raises(LbscaleError, match=f"--target 0.8: at or below chance: .* {share:.3f} on the val split"):
        check_inputs(DesignOptions(data=data, model="simple_cnn", wall="20m", out=tmp_path / "s.yaml",
                                   target=0.8), 1200.0)


def test_the_pilots_trials_stop_at_its_limit_and_a_rerun_trains_nothing_more(tiny_h5, tmp_path):
    """Nothing bounded the pilot's time: its trials ran with no deadline (a 30-minute design of 8,000 JPEGs ran a
    236 s pilot). Now a trial running at the limit is stopped there (its curve so far kept), none starts past it,
    and the kept pilot does not train them again."""
    import time

    from lbscale.analysis.pilot import PilotRecord, Step, Timing
    from lbscale.studies.design import DesignOptions, check_inputs
    from lbscale.studies.pilot_run import PilotRun

    o = DesignOptions(data=tiny_h5, model="simple_cnn", wall="30m", out=tmp_path / "x.yaml")
    facts = check_inputs(o, 1800.0)
    (tmp_path / "p").mkdir()
    run = PilotRun(o, facts, tmp_path / "p", 1800.0)
    # the limit is 180 s; 172 s spent: 8 s left for two trials of 40 epochs (about 20 s each here)
    run.record = PilotRecord({}, 32, 64, 0.05, 40, 2, Timing(0.01, 0.1, 80, 1.0), "here", seconds=172.0)
    t0 = time.monotonic()
    first, second = run.stage(Step("mid", 32, (0.05, 0.1), 40))
    took = time.monotonic() - t0
    assert run.record.cut == ["b32-lr0.05", "b32-lr0.1"]
    assert first[1] and not second[1]  # the first's curve so far; the second never started
    assert took < 8 + 15 and run.record.seconds == pytest.approx(172.0 + took, abs=0.2)
    again = run.stage(Step("mid", 32, (0.05, 0.1), 40))
    assert again == [first, second] and run.record.seconds == pytest.approx(172.0 + took, abs=0.2)


def test_a_failed_pilot_trial_is_named_with_its_own_error(tiny_h5, tmp_path):
    """The message took the error from the stage's first trial's summary: where the second failed, it said "see its
    train.log" instead of that trial's own error."""
    from lbscale.analysis.pilot import PilotRecord, Step, Timing
    from lbscale.errors import LbscaleError
    from lbscale.results import SUMMARY, write_json
    from lbscale.studies.design import DesignOptions, check_inputs
    from lbscale.studies.pilot_run import PilotRun

    o = DesignOptions(data=tiny_h5, model="simple_cnn", wall="30m", out=tmp_path / "x.yaml")
    (tmp_path / "p").mkdir()
    run = PilotRun(o, check_inputs(o, 1800.0), tmp_path / "p", 1800.0)
    run.record = PilotRecord({}, 32, 64, 0.05, 2, 2, Timing(0.01, 0.1, 80, 1.0), "here")
    for lr, summary in ((0.05, {"status": "completed"}), (0.1, {"status": "failed", "error": "boom"})):
        (tmp_path / "p" / f"b32-lr{lr}").mkdir()
        write_json(tmp_path / "p" / f"b32-lr{lr}" / SUMMARY, summary)
    with pytest.raises(LbscaleError, match=r"pilot trial b32-lr0.1 failed \(boom\)"):
        run.stage(Step("mid", 32, (0.05, 0.1), 2))
