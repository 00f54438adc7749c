"""Evaluations spaced geometrically in optimizer steps (--eval-spacing): steps to target at a fixed relative
precision at every batch, and a subset value close to the target checked on the whole split, so the crossing is
bracketed by two whole-split evaluations."""

import json
import math

import numpy as np
import pytest

from lbscale.analysis.evaluations import check_parts, clearly_below, geometric_steps
from lbscale.train.evaluation import near_target
from tests.train.helpers import run_train, summary  # noqa: F401

BASE = ["--global-batch", "32", "--model", "test_resnet", "--quiet", "--device", "cpu", "--optimizer", "sgd",
        "--base-lr", "0.05"]  # tiny set: 560 train images, 17 steps per epoch


def test_geometric_steps_by_hand():
    # each step at most 25% after the previous one (floor), one step apart where 25% is under a step
    assert geometric_steps(1, 0.25, 40) == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 18, 22, 27, 33]
    assert geometric_steps(4, 0.5, 30) == [4, 6, 9, 13, 19, 28]
    assert geometric_steps(50, 0.1, 50) == []  # the first past the run: none
    # 5%: the gap relative to the later step never exceeds the spacing, and the count is about ln(S)/ln(1.05)
    s = geometric_steps(1, 0.05, 10_000)
    assert all((b - a) / b <= 0.05 or b - a == 1 for a, b in zip(s, s[1:]))
    assert 147 <= len(s) <= 1.1 * 147  # 20 + ln(10000 / 20) / ln(1.05), a little more for the floor


@pytest.mark.parametrize("args, message", [
    (["--eval-spacing", "0"], "--eval-spacing must be > 0 and <= 1"),
    (["--eval-spacing", "1.5"], "--eval-spacing must be > 0 and <= 1"),
    (["--eval-spacing", "nan"], "--eval-spacing must be > 0 and <= 1"),
    (["--eval-spacing", "0.1", "--eval-every", "5"], "give one of --eval-every, --eval-every-samples, --eval-spacing"),
    (["--eval-first", "3"], "--eval-first goes with --eval-spacing"),
])
def test_spacing_refusals(tiny_h5, tmp_path, run_cli, args, message):
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", tmp_path / "x", "--epochs", "1", *BASE, *args)
    assert rc == 2 and message in err and "Traceback" not in err


def test_a_trial_evaluates_at_geometric_steps(tiny_h5, tmp_path, run_cli):
    out = tmp_path / "geo"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "2", *BASE, "--eval-spacing", "0.25",
                         "--eval-first", "2")
    assert rc == 0, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r.get("kind") == "step"] == [2, 3, 4, 5, 6, 7, 8, 10, 12, 15, 18, 22, 27, 33]


def test_near_target_by_hand():
    # accuracy-like metrics: within two binomial standard errors of the subset (p(1-p) at least 1/n)
    assert near_target(0.90, 0.95, 100, True)  # 2 * sqrt(0.09/100) = 0.06
    assert not near_target(0.88, 0.95, 100, True)
    assert near_target(0.97, 0.95, 100, True)  # past it: the whole split decides
    assert near_target(1.0, 1.0, 40, True) and not near_target(0.5, 1.0, 40, True)
    assert not near_target(0.5, 0.4, 40, False)  # a loss has no binomial error: only a met target
    assert near_target(0.39, 0.4, 40, False)


def test_a_subset_value_near_the_target_is_checked_on_the_whole_split(tiny_h5, tmp_path, run_cli):
    """Every subset evaluation within two standard errors of the target (and only those) gets a whole-split
    record at the same step: the evaluation before the crossing is then a whole-split one."""
    out = tmp_path / "near"
    rc, _, err = run_cli("train", "--data", tiny_h5, "--out", out, "--epochs", "2", *BASE, "--eval-spacing", "0.25",
                         "--eval-subset", "40", "--target-metric", "val_top1", "--target", "0.3")
    assert rc == 0, err
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    subset = {r["step"]: r["val_top1"] for r in rows if r.get("kind") == "step" and r.get("check") is None}
    whole = {r["step"] for r in rows if r.get("kind") == "step" and r.get("check") is not None}
    near = {s for s, v in subset.items() if near_target(v, 0.3, 40, True)}
    assert whole <= near
    reached = min((s for s in whole), default=None)
    assert whole == {s for s in near if reached is None or s <= max(whole)}
    checks = [r for r in rows if r.get("check") is not None]
    assert any(r["subset"] is not None for r in checks)  # one stopped early (step 2: 0.05 on 20 images)
    # the report reads the checks from the trial's files: the crossing lies after the last check before it, a
    # stopped one included (here step 2's), and at the first whole-split value at the target
    from lbscale.report import load_results
    from lbscale.report.tuned import steps_to_result

    hit = steps_to_result(load_results([out]).steps, "val_top1", 0.3, True).iloc[0]
    first = min(r["step"] for r in checks if r["subset"] is None and r["val_top1"] >= 0.3)
    assert hit["step"] == first and hit["step_before"] == max(r["step"] for r in checks if r["step"] < first)
    # a check reads the split (80 images) in parts of 20, 20, 40; one stopped early is recorded as a subset
    # evaluation of the images it read, clearly below the target (2.5 standard errors, finite-population factor)
    for r in checks:
        assert (r["check"], r["subset"]) in ((80, None), (20, 20), (40, 40))
        if r["subset"] is not None:
            assert r["val_top1"] + 2.5 * math.sqrt(max(r["val_top1"] * (1 - r["val_top1"]), 1 / r["check"])
                                                 / r["check"] * (1 - r["check"] / 80)) < 0.3


def test_clearly_below_by_hand():
    # 0.70 on 200 of 1,600: se sqrt(0.21 / 200) = 0.0324, x sqrt(1 - 1/8) = 0.0303; 0.70 + 0.061 < 0.80
    assert clearly_below(0.70, 0.80, 200, 1600)
    # 0.75: se sqrt(0.1875 / 200) x 0.935 = 0.0286; 0.75 + 0.057 = 0.807 >= 0.80
    assert not clearly_below(0.75, 0.80, 200, 1600)
    assert not clearly_below(0.10, 0.80, 1600, 1600)  # the whole split read: nothing left to stop
    assert not clearly_below(float("nan"), 0.8, 10, 100)


def test_check_parts_are_a_fixed_random_order_cut_at_an_eighth_a_quarter_and_a_half():
    parts = check_parts(1600)
    assert [len(p) for p in parts] == [200, 200, 400, 800]
    assert sorted(np.concatenate(parts).tolist()) == list(range(1600))
    assert all(np.array_equal(a, b) for a, b in zip(parts, check_parts(1600)))
    assert [len(p) for p in check_parts(80)] == [20, 20, 40]  # a look under 20 images (80 / 8) is skipped
    assert [len(p) for p in check_parts(30)] == [30]


def test_a_split_whose_whole_value_meets_the_target_is_rarely_stopped():
    """By simulation, not by the rule's own arithmetic: splits of 1,600 examples whose whole value is exactly the
    target, read in random orders with looks at 200, 400 and 800; the checks that stop (a whole-split value at the
    target declared a miss) stay under 3%, and a split 0.06 below the target is stopped, having read about a
    quarter of it."""
    rng = np.random.default_rng(7)

    def stops(p_whole, target, n=1600, runs=4000):
        stopped, read = 0, 0
        ones = int(round(p_whole * n))
        for _ in range(runs):
            x, seen = rng.permutation(np.r_[np.ones(ones), np.zeros(n - ones)]), n
            for look in (200, 400, 800):
                if clearly_below(x[:look].mean(), target, look, n):
                    stopped, seen = stopped + 1, look
                    break
            read += seen
        return stopped / runs, read / runs / n

    assert stops(0.80, 0.80)[0] < 0.03
    stopped, read = stops(0.74, 0.80)
    assert stopped > 0.99 and read < 0.35  # about a quarter of the split read


@pytest.mark.slow
def test_two_ranks_check_the_whole_split_in_parts_and_stop_together(tiny_h5, tmp_path):
    """Each rank reads its shard of each part and both compute after each: the same calls, the same decision (a
    rank that stopped alone would wait for ever in the other's sync)."""
    out = tmp_path / "ddp"
    r = run_train("--data", tiny_h5, "--out", out, "--epochs", "1", *BASE, "--eval-spacing", "0.25",
                  "--eval-subset", "40", "--target-metric", "val_top1", "--target", "0.3", nproc=2, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    checks = [(row["check"], row["subset"]) for row in rows if row.get("check") is not None]
    assert checks and set(checks) <= {(80, None), (20, 20), (40, 40)}
