"""Evaluations spaced geometrically in optimizer steps (--eval-spacing): steps to target at a fixed relative
precision at every batch, and a subset value close to the target checked on the whole split, so the crossing is
bracketed by two whole-split evaluations."""

import json

import pytest

from lbscale.train.evaluation import geometric_steps, near_target
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
    subset = {r["step"]: r["val_top1"] for r in rows if r.get("kind") == "step" and r["subset"] == 40}
    whole = {r["step"] for r in rows if r.get("kind") == "step" and r["subset"] is None}
    near = {s for s, v in subset.items() if near_target(v, 0.3, 40, True)}
    assert whole <= near
    reached = min((s for s in whole), default=None)
    assert whole == {s for s in near if reached is None or s <= max(whole)}
