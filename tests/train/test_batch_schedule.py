"""Batch-size schedules: parsing, the batch at a place in the data, the LR factor, bad input as one line."""

import json
import math

import pytest

from lbscale.results import read_jsonl

from lbscale.errors import LbscaleError
from lbscale.train.batch_schedule import BatchSchedule


def test_points_in_epochs_and_samples_and_the_batch_at_each_place():
    s = BatchSchedule.parse("64@0,128@2ep,256@6400", epoch_samples=2000)
    assert s.points == ((0, 64), (4000, 128), (6400, 256)) and s.first == 64
    assert [s.batch_at(n) for n in (0, 3999, 4000, 6399, 6400, 10 ** 6)] == [64, 64, 128, 128, 256, 256]
    assert s.lr_factor(256) == 4.0
    assert BatchSchedule.parse("64@0,256@1ep", 100, "sqrt").lr_factor(256) == 2.0
    assert BatchSchedule.parse("64@0,256@1ep", 100, "none").lr_factor(256) == 1.0
    steps = BatchSchedule.parse("32@0,64@10st,128@1ep", epoch_samples=1000)  # steps as taken, at their batches
    assert steps.points == ((0, 32), (("steps", 10), 64), (1000, 128)) and steps.last == 128
    assert [steps.batch_at(n, k) for n, k in ((0, 0), (288, 9), (320, 10), (990, 20), (1000, 21))] == [32, 32, 64,
                                                                                                      64, 128]
    assert math.isclose(BatchSchedule.parse("8192@0,16384@30ep", 1281167).points[1][0], 30 * 1281167)


def test_fractional_epochs_are_checked_before_the_data_is_known(tmp_path, run_cli):
    from lbscale.train.config import load_config

    cfg = load_config(None, data="d.h5", out=str(tmp_path), global_batch=32,
                      batch_schedule="32@0,64@0.25ep,128@1.2ep,256@1.4ep")
    assert cfg.batch_schedule.endswith("1.4ep")


@pytest.mark.parametrize("text, message", [("64@1,128@2ep", "starts at 0"), ("64@0,128@x", "is not BATCH@POINT"),
                                           ("64@0,128@infep", "is not BATCH@POINT"),
                                           ("64@0,128@5st,256@3st", "must increase"), ("64@0,128@-1st", "BATCH@POINT"),
                                           ("64@0,128@2ep,256@1ep", "must increase"), ("", "starts at 0")])
def test_bad_schedules_are_one_line(text, message):
    with pytest.raises(LbscaleError, match=message):
        BatchSchedule.parse(text, 1000)


def test_every_batch_a_whole_number_of_first_steps():
    BatchSchedule.parse("64@0,192@1ep", 1000).check(64)
    with pytest.raises(LbscaleError, match="batch 96 is not a multiple of 64"):
        BatchSchedule.parse("64@0,96@1ep", 1000).check(64)


BASE = ["--model", "test_resnet", "--quiet", "--device", "cpu", "--optimizer", "sgd", "--momentum", "0.9",
        "--base-lr", "0.05", "--epochs", "2", "--global-batch", "32", "--schedule", "cosine",
        "--batch-schedule", "32@0,64@1ep,128@816"]  # tiny set: 17 micro-batches of 32 an epoch (544 samples)


def test_a_schedule_counts_steps_exactly_and_resumes_bit_identically_across_a_change(tiny_h5, tmp_path, run_cli):
    from tests.train.helpers import summary

    whole = tmp_path / "whole"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", whole, *BASE)
    assert rc == 0, err
    s = summary(whole)
    # epoch 1: 17 steps of 32; epoch 2 from 544 samples: steps of 64 starting at 544, 608, 672, 736, 800, then
    # from 864 (>= 816) steps of 128: micro-batches 10..13 and the epoch's last 3: 17 + 5 + 2 = 24 steps
    assert s["steps"] == 24
    sched = BatchSchedule.parse("32@0,64@1ep,128@816", 544)
    assert sched.total_steps(2, 17, 32, 544) == 24  # the dry-run's count: the same grouping, by hand above
    assert s["batch_schedule"] == [{"step": 0, "samples_seen": 0, "global_batch": 32},
                                   {"step": 17, "samples_seen": 544, "global_batch": 64},
                                   {"step": 22, "samples_seen": 864, "global_batch": 128}]
    # the LR of the last step (it starts at micro-batch 14 of epoch 2: step 17 + 14 = 31 of 34 in steps of the
    # first batch) by hand: cosine from the peak, times 96 / 32 (the linear rule for what it trained: the epoch's
    # last 3 micro-batches of 32)
    peak = json.loads((whole / "config.json").read_text())["plan"]["peak_lr"]
    assert peak == pytest.approx(0.05 * 32 / 256)
    last_epoch = [r for r in read_jsonl(whole / "metrics.jsonl") if r.get("epoch") == 2][-1]
    assert last_epoch["lr"] == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * 31 / 34)) * 3)
    cut = tmp_path / "cut"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", cut, *BASE, "--preempt-after-steps", 19)
    assert rc == 75, err
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", cut, *BASE, "--resume")
    assert rc == 0, err
    assert summary(cut)["param_digests"] == s["param_digests"]
    assert summary(cut)["batch_schedule"] == s["batch_schedule"]


def test_a_schedule_with_each_batchs_lr_runs_through_a_short_last_step(tiny_h5, tmp_path, run_cli):
    """Each batch's own LR (lbscale schedule writes them): the last step of epoch 2 trains 3 of 128's micro-
    batches; its LR is 128's item LR, times the linear rule's 96 / 128, under the cosine schedule (a KeyError
    before: the factor was looked up by the samples the cut step trained)."""
    peak = 0.05 * 32 / 256
    out = tmp_path / "lrs"
    items = f"32@0:{peak:g},64@1ep:{2 * peak:g},128@816:{3 * peak:g}"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, *BASE[:-1], items)
    assert rc == 0, err
    last_epoch = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("epoch") == 2][-1]
    assert last_epoch["lr"] == pytest.approx(peak * 0.5 * (1 + math.cos(math.pi * 31 / 34)) * 3 * 96 / 128)
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "bad", *BASE[:-1],
                         f"32@0:{2 * peak:g},64@1ep:{3 * peak:g}")
    assert rc == 2 and "the first batch's LR" in err and len(err.strip().splitlines()) == 1


def test_a_schedule_that_does_not_fit_is_one_line(tiny_h5, tmp_path, run_cli):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", *BASE[:-2], "--batch-schedule",
                         "64@0,128@1ep")
    assert rc == 2 and "give --global-batch 64" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", *BASE, "--prune", "asha",
                         "--prune-min-steps", 4, "--prune-group", "g", "--eval-every", 4)
    assert rc == 2 and "does not go with --prune" in err


def test_auto_doubles_where_the_branch_study_allows(tmp_path):
    csv = tmp_path / "critical-batch.csv"
    csv.write_text("checkpoint,samples,factor,batch,loss,critical_batch\n"
                   "a,512,1,32,1.0,32\na,512,2,64,1.1,32\n"      # 32 is not over 2 x 32: stays
                   "b,1024,1,32,0.9,200\nb,1024,2,64,0.9,200\n"  # 200 > 64 and > 128: two doublings at once
                   "c,4096,1,32,0.5,256\n"                       # 256 is not over 2 x 128: stays
                   "d,8192,1,32,0.4,400\n")                      # 400 > 256: one doubling (not over 512)
    s = BatchSchedule.parse(f"auto:{csv}", 1000, first=32)
    assert s.points == ((0, 32), (1024, 128), (8192, 256))
    # with repeats the interval decides: its lower end where it has one; an upper bound or "not resolved" (an empty
    # critical_batch, which read before as no doubling without a word) holds the batch
    rep = tmp_path / "repeats.csv"
    rep.write_text("checkpoint,samples,factor,batch,loss,critical_batch,critical_lo,critical_hi,critical_kind\n"
                   "a,512,1,32,1.0,256,0,512,upper\n"                # point 256, but only < 512: holds
                   "b,1024,1,32,0.9,,,,none\n"                       # not resolved: holds
                   "c,2048,1,32,0.8,300,160,512,interval\n"          # lower end 160 > 64 > 128: 128
                   "d,4096,1,32,0.7,512,512,inf,lower\n")            # > 512: 512 > 256: 256
    assert BatchSchedule.parse(f"auto:{rep}", 1000, first=32).points == ((0, 32), (2048, 128), (4096, 256))
    with pytest.raises(LbscaleError, match="not a critical-batch.csv"):
        (tmp_path / "x.csv").write_text("a,b\n1,2\n")
        BatchSchedule.parse(f"auto:{tmp_path / 'x.csv'}", 1000, first=32)
    with pytest.raises(LbscaleError, match="No such file"):
        BatchSchedule.parse(f"auto:{tmp_path / 'none.csv'}", 1000, first=32)


def _plan(local_batch, world_size, micro_batches_per_epoch, epoch_samples):
    from lbscale.train.plan import Plan

    return Plan(world_size, local_batch * world_size, local_batch, 1, epoch_samples, micro_batches_per_epoch, None,
                0.1, 0.0, 0, micro_batches_per_epoch, epoch_samples)


def test_a_schedule_that_shrinks_the_batch_or_changes_past_the_run_is_refused(tiny_h5, tmp_path, run_cli):
    """--batch-schedule grows the batch (its help says so): 64@0,32@1ep trained at 64 then 32, and a change point
    past the run (32@0,64@9ep on 2 epochs, 64@999st) trained without it; both are one line and exit 2, nothing
    written. The last step a point can start is the run's last (33 of 34 steps at 32, the steps as taken)."""
    with pytest.raises(LbscaleError, match=r"--batch-schedule: the batch must grow: 32 after 64"):
        BatchSchedule.parse("64@0,32@1ep", 1000)
    common = [*BASE[:-6], "--schedule", "constant"]  # 2 epochs of 544 samples
    cases = [("64", "64@0,32@1ep", "the batch must grow: 32 after 64"),
             ("32", "32@0,64@9ep", "64@9ep lies past the run (2 epochs): it would never apply"),
             ("32", "32@0,64@5000", "64@5000 lies past the run (2 epochs, 1,088 samples): it would never apply"),
             # a point in steps was not checked (issue 54, item 9); 34 steps of 32 are numbered 0..33
             ("32", "32@0,64@999st", "64@999st lies past the run (2 epochs, 34 optimizer steps): it would never "
                                     "apply"),
             ("32", "32@0,64@34st", "64@34st lies past the run (2 epochs, 34 optimizer steps)")]
    for i, (first, text, needle) in enumerate(cases):
        out = tmp_path / f"x{i}"
        rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, *common, "--global-batch", first,
                             "--batch-schedule", text)
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, err
        assert not out.exists() or not any(out.iterdir()), list(out.iterdir())
    sched = BatchSchedule.parse("32@0,64@33st", 544)
    sched.check_plan(2, _plan(32, 1, 17, 544))
    # 17 steps of 32, then 9 from step 17 at 64 (8 and the epoch's last micro-batch): steps 0..25
    BatchSchedule.parse("32@0,64@17st,128@25st", 544).check_plan(2, _plan(32, 1, 17, 544))
    with pytest.raises(LbscaleError, match=r"128@26st lies past the run \(2 epochs, 26 optimizer steps\)"):
        BatchSchedule.parse("32@0,64@17st,128@26st", 544).check_plan(2, _plan(32, 1, 17, 544))


def test_items_may_carry_each_batch_its_lr():
    s = BatchSchedule.parse("32@0:0.02,64@1ep:0.03,128@3000:0.045", epoch_samples=1000, rule="linear")
    assert s.points == ((0, 32), (1000, 64), (3000, 128)) and s.items == ("32@0", "64@1ep", "128@3000")
    assert s.lrs == ((32, 0.02), (64, 0.03), (128, 0.045))
    assert math.isclose(s.lr_factor(64), 1.5) and math.isclose(s.lr_factor(128), 2.25)  # not the linear rule's 2, 4
    assert s.lr_factor(32) == 1.0
    # a step an epoch's end cut short (80 of 128's samples): 128's own LR, times the rule's factor for the rest
    assert math.isclose(s.lr_factor(80, 128), 2.25 * 80 / 128)
    assert math.isclose(BatchSchedule.parse("32@0:0.02,128@1ep:0.045", 1000, "none").lr_factor(80, 128), 2.25)
    s.check_run(4, 1000)  # the LR does not hide the point from the run check
    with pytest.raises(LbscaleError, match="64@4ep lies past the run"):
        BatchSchedule.parse("32@0:0.02,64@4ep:0.03", 1000).check_run(3, 1000)


@pytest.mark.parametrize("text, message", [("32@0:0.02,64@1ep", "64@1ep lacks one"),
                                           ("32@0:0.02,64@1ep:x", "no LR > 0"),
                                           ("32@0:0.02,64@1ep:-1", "no LR > 0"),
                                           ("32@0:0.02,64@1ep:nan", "no LR > 0")])
def test_bad_item_lrs_are_one_line(text, message):
    with pytest.raises(LbscaleError, match=message):
        BatchSchedule.parse(text, 1000)


def test_the_first_items_lr_must_be_the_trials_own():
    from types import SimpleNamespace

    plan = SimpleNamespace(local_batch=32, world_size=1, peak_lr=0.02, micro_batches_per_epoch=32,
                           epoch_samples=1024)
    BatchSchedule.parse("32@0:0.02,64@1ep:0.03", 1024).check_plan(3, plan)
    with pytest.raises(LbscaleError, match="the first batch's LR 0.025 is not the trial's own peak LR 0.02"):
        BatchSchedule.parse("32@0:0.025,64@1ep:0.03", 1024).check_plan(3, plan)
