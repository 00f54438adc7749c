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
    assert 0.1 < spec["trial"]["target"] < 1 and spec["grid"]["search"]["trials"] == 6
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
    from lbscale.data.prepare import prepare

    no_val = tmp_path / "noval.h5"
    prepare("synthetic", None, no_val, count=200, bands=3, size=16, classes=4, seed=3, command="test",
            val_fraction=0.0)
    cases = [
        ((no_val, "--wall", "10m"), "no val split"),
        ((tiny_h5, "--wall", "4m"), "too small for a pilot"),
        ((tiny_h5, "--wall", "10"), "wall-clock time with its unit"),
        ((tiny_h5, "--wall", "10m", "--metric", "val_loss"), "higher is better"),
        ((tiny_h5, "--wall", "10m", "--metric", "val_f1_micro"), "--metric"),
        ((tmp_path / "missing.h5", "--wall", "10m"), "no such prepared file"),
    ]
    for args, words in cases:
        out = tmp_path / "x.yaml"
        r = lbscale("design", *args[:1], "--model", "simple_cnn", *args[1:], "--out", out,
                    "--results", tmp_path / "r", check=False)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, (args, r.stderr)
        assert not out.exists() and not (tmp_path / "r-pilot").exists()


def test_a_pilot_that_never_rose_above_chance_places_no_target():
    """Before, a flat pilot at chance got a plateau of 0.1 and the target chance + 0.9 x 0 = 0.1, which its first
    evaluation 'reached': a design on nothing. Now one line says the pilot never learned."""
    from pathlib import Path

    import pytest

    from lbscale.errors import LbscaleError
    from lbscale.studies.design import Choice, DataFacts, DesignOptions, choose_target

    flat = [(s * 100.0, 0.1 + 0.01 * (s % 2)) for s in range(1, 9)]  # 0.10-0.11 on 500 images: chance's noise
    stages = {"mid": [(0.05, flat)], "largest": [(0.1, flat)]}
    pilot = {"mid": 64, "largest": 256, "epochs": 2}
    facts = DataFacts(3000, 500, 10, "multiclass", "val_top1", 0.1)
    costs = {"per_sample": {64: 0.001, 256: 0.001}, "per_eval_example": 0.0003, "startup": 1.0}
    with pytest.raises(LbscaleError, match="never rose above chance"):
        choose_target(DesignOptions(Path("d.h5"), "m", "20m", Path("o.yaml")), stages, pilot, costs, facts, 500.0,
                      Choice((0.01, 0.2), "the LR range"))


def test_the_pilot_trains_on_where_it_has_time_left_past_the_largest_stage():
    from lbscale.studies.design import long_epochs

    # three middle trials took 90 s (30 s each, 5 s of it the start-up: 25 s for 3 epochs); a 30-minute budget's
    # pilot has 180 s; the largest stage's three trials at 3 epochs are set aside (90 s) and a start-up (5 s)
    timing = {"startup": 5.0}
    assert long_epochs({"mid_seconds": 90.0, "timing": timing, "epochs": 3, "seconds": 60.0}, 3, 1800) == 6  # 25 s
    assert long_epochs({"mid_seconds": 90.0, "timing": timing, "epochs": 3, "seconds": 75.0}, 3, 1800) == 4  # 10 s
    assert long_epochs({"mid_seconds": 90.0, "timing": timing, "epochs": 3, "seconds": 80.0}, 3, 1800) == 0  # 5 s
    assert long_epochs({"mid_seconds": 90.0, "timing": timing, "epochs": 3, "seconds": 100.0}, 3, 1800) == 0


def test_a_trial_trained_on_from_its_checkpoint_is_the_longer_trial(tiny_h5, tmp_path):
    from lbscale.studies.design import DesignOptions, check_inputs, run_longer, run_stage

    o = DesignOptions(data=tiny_h5, model="simple_cnn", wall="60m", out=tmp_path / "x.yaml")
    facts = check_inputs(o)
    pilot = {"mid": 32, "epochs": 2, "evals": 2, "seconds": 0.0}
    (tmp_path / "p").mkdir()
    (short,) = run_stage(o, facts, tmp_path / "p", pilot, "mid", 32, [0.05])
    longer = run_longer(o, facts, tmp_path / "p", pilot, 0.05, 4)
    (tmp_path / "q").mkdir()
    (direct,) = run_stage(o, facts, tmp_path / "q", {**pilot, "seconds": 0.0}, "mid", 32, [0.05], epochs=4)
    # the same values at the same sample counts as a 4-epoch trial from the start; its first half the 2-epoch one's
    assert longer == direct[1] and len(longer) == 2 * len(short[1]) and longer[:len(short[1])] == short[1]
    assert pilot["long_seconds"] > 0 and (tmp_path / "p" / "b32-lr0.05-e4" / "summary.json").exists()
    used = pilot["seconds"]
    assert run_longer(o, facts, tmp_path / "p", pilot, 0.05, 4) == longer and pilot["seconds"] == used  # kept
    assert not any(p.name.endswith(".part") for p in (tmp_path / "p").iterdir())


def test_the_grid_price_counts_each_trials_test_split_once_at_its_end():
    from dataclasses import replace

    from lbscale.studies.design import CONFIRM_TOP, DataFacts, grid_seconds

    facts = DataFacts(3000, 500, 10, "multiclass", "val_top1", 0.1)
    costs = {"per_sample": {64: 1e-3, 256: 8e-4}, "per_eval_example": 2e-4, "startup": 0.5}
    ev = {"subset": 100, "spacing": 0.3, "first": {32: 23, 64: 15, 128: 11}, "near": 0.5, "target": 0.8}
    ratios, batches = [0.5, 1.0, 2.0], [32, 64, 128]
    args = (batches, {32: 3000.0, 64: 4000.0, 128: 6000.0}, costs)
    rest = (ev, None, {0.5: 1.5, 1: 1.0, 2: 1.6}, ratios, {32: 3, 64: 4, 128: 6})
    without = grid_seconds(*args, facts, *rest)
    # three search points and the confirmation's reruns a batch, each evaluating 10,000 test images at 2e-4 s
    extra = len(batches) * (len(ratios) + CONFIRM_TOP) * 10_000 * 2e-4
    assert grid_seconds(*args, replace(facts, test=10_000), *rest) == pytest.approx(without + extra)


def test_where_no_evaluation_fits_its_share_the_choice_says_what_the_crossings_own_check_costs():
    from lbscale.studies.design import DataFacts, evaluation_choice

    # a step costs 0.01 s fixed + 1e-4 s a sample; the whole 1,500-image split 0.375 s (2.5e-4 s an image)
    costs = {"per_sample": {64: (0.01 + 64e-4) / 64, 256: (0.01 + 256e-4) / 256}, "per_eval_example": 2.5e-4,
             "startup": 0.5}
    facts = DataFacts(3000, 1500, 10, "multiclass", "val_top1", 0.1)
    near = {n: 0.5 for n in (1500, 1000, 500, 250, 100)}
    # batch 32 reaches the target after 3,200 samples: 100 steps of 0.0132 s = 1.32 s, 0.375 / 1.32 = 28.4%;
    # batch 64 after 4,800: 75 steps of 0.0164 s = 1.23 s, 30.5%: batch 64 binds
    ev = evaluation_choice([32, 64], {32: 3200.0, 64: 4800.0}, costs, facts, near, 0.8)
    assert ev["share"] > 0.10
    assert ev["floor"] == (pytest.approx(0.375 / 1.23), 64)
    # each batch evaluated from a quarter of its own predicted steps on: 100 / 4 and 75 / 4
    assert ev["first"] == {32: 25, 64: 18}
    # a long training: the subset fits, and the floor is small
    ev = evaluation_choice([32, 64], {32: 320_000.0, 64: 480_000.0}, costs, facts, near, 0.8)
    assert ev["share"] <= 0.10 and ev["floor"] == (pytest.approx(0.375 / 123), 64)


def test_the_lr_range_widens_to_cover_every_lr_fastest_to_the_chosen_target():
    from lbscale.studies.design import Choice, fastest_lrs, widened

    # make demo-real, 2026-12-05: at batch 64 the pilot's 0.01581 and 0.05 reached val_top1 0.77 at the same
    # evaluation (6,000 samples), 0.005 later, 0.1581 never; the range, 4x either side of the best final value
    # (0.01581), was [0.00395, 0.0632], and the optima at batches 64 and 128 sat on its top edge
    stage = [(0.005, [(3000, 0.6), (6000, 0.72), (9000, 0.78)]), (0.01581, [(3000, 0.7), (6000, 0.775)]),
             (0.05, [(3000, 0.69), (6000, 0.771)]), (0.1581, [(3000, 0.5), (6000, 0.6)])]
    assert fastest_lrs(stage, 0.77) == [0.01581, 0.05]
    assert fastest_lrs(stage, 0.99) == []
    rng = widened(Choice((0.00395, 0.0632), "4x either side of 0.01581"), [0.01581, 0.05], 64)
    assert rng.value == (0.00395, 0.2)
    assert "widened to 4x past 0.01581 and 0.05, the pilot's LRs fastest to the target at batch 64" in rng.why
    # inside already: unchanged, reason and all
    same = Choice((0.001, 0.5), "r")
    assert widened(same, [0.01581, 0.05], 64) is same


def test_a_steps_price_runs_through_every_batch_the_pilot_timed():
    import pytest

    from lbscale.studies.design import per_sample_at

    # make demo-real, 2026-12-06: the pilot's trials ran 0.000587 s a sample at batch 64 and 0.000586 at 256 (no
    # fixed cost between them), and the designer priced batch 8 at 0.000596; the sweep's batch-8 trials took 15.5
    # ms a step, 0.00194 a sample (3.3x). Timed at batch 8 too (16 ms a step), a step's seconds run straight
    # between the timed batches: at 16, 16 ms + 8 / 56 of the way to 64's 38.4 ms = 19.2 ms, 0.0012 s a sample;
    # at 128, a third of the way from 38.4 to 153.6 ms = 76.8 ms, 0.0006 a sample
    costs = {"per_sample": {8: 0.002, 64: 0.0006, 256: 0.0006}}
    assert per_sample_at(costs, 8) == pytest.approx(0.002)
    assert per_sample_at(costs, 16) == pytest.approx(0.0192 / 16)
    assert per_sample_at(costs, 32) == pytest.approx((0.016 + 0.0224 * 24 / 56) / 32)
    assert per_sample_at(costs, 128) == pytest.approx(0.0006)
    # outside the timed batches the nearest two's line goes on where it has a fixed cost (8 to 64: 12.8 ms + 0.4 ms
    # a sample; at 4, 14.4 ms a step), else a sample costs what it cost at the nearest (64 to 256 have none)
    assert per_sample_at(costs, 4) == pytest.approx(0.0144 / 4) and per_sample_at(costs, 1024) == pytest.approx(0.0006)
    # two timed batches as before: a fixed cost a step and one a sample through them (10 ms + 1e-4 s a sample)
    two = {"per_sample": {64: (0.01 + 64e-4) / 64, 256: (0.01 + 256e-4) / 256}}
    assert per_sample_at(two, 128) == pytest.approx((0.01 + 128e-4) / 128)
