"""The report's ladder (report/ladder.py) on a tuned study built by code with a known truth: every trial's
metric rises linearly to its own steps S(B) = 1000 (1 + 256 / B) (tests/report/make_tuned.py), so a target a
fraction f of the way takes f S(B) steps at every batch and B_crit is 256 at every rung; the reference run (batch
64, the optimal LR: 5,000 steps to 0.9) reaches a target T after T / 0.9 x 5,000 x 64 samples. Checked against those
values, not against the code's helpers."""

import math
from pathlib import Path

import pandas as pd
import pytest

from tests.report.make_tuned import make_tuned_study, make_tuned_trial
from tests.sweep.test_launch import lbscale

TRUTH = 256.0
LADDER = (0.6, 0.7, 0.8, 0.9)


def _samples(target):
    return target / 0.9 * 5000 * 64


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """The study, a reference run trained on past 0.9 (as `lbscale predict --at 0.95` leaves it), and its report
    at the ladder's targets."""
    root = tmp_path_factory.mktemp("ladder")
    results = make_tuned_study(root / "tuned", batches=(64, 128, 256, 512, 1024, 2048), prune=(), pending=False)
    d = make_tuned_trial(results / "predict-0.95", 64, 0.02 * 64 ** 0.5, None, own_target=False, epochs=2)
    d.rename(d.parent / "reference")
    lbscale("report", results, "--target", ",".join(map(str, LADDER)), "--out", root / "rep")
    return root / "rep"


def test_each_rung_holds_the_truth_and_is_placed_where_the_reference_run_crossed_it(reported):
    t = pd.read_csv(reported / "tables" / "ladder.csv")
    rungs = t[t["source"] == "sweep"].sort_values("target")
    assert list(rungs["target"]) == list(LADDER)
    for _, r in rungs.iterrows():
        assert r["b_crit_kind"] == "interval" and r["b_crit_lo"] <= TRUTH <= r["b_crit_hi"], r.to_dict()
        assert r["samples"] == pytest.approx(_samples(r["target"]), rel=0.01)  # one evaluation apart at most


def test_the_law_through_a_flat_ladder_has_gamma_about_zero_and_predicts_the_truth(reported):
    t = pd.read_csv(reported / "tables" / "ladder.csv")
    law = t[(t["source"] == "the law") & (t["target"] == 0.95)].iloc[0]
    assert law["b_crit_kind"] == "interval" and law["b_crit_lo"] <= TRUTH <= law["b_crit_hi"]
    assert law["samples"] == pytest.approx(_samples(0.95), rel=0.01)
    md = (reported / "report.md").read_text()
    gamma = md.split("gamma = ")[1]
    lo, hi = (float(x) for x in gamma.split("[")[1].split("]")[0].split(", "))
    assert lo < 0 < hi
    stretch = _samples(0.95) / _samples(0.9)  # E grows as the samples do where B_crit is the same
    assert f"({stretch:.1f}x the study's training)" in md
    simple = t[(t["source"] != "sweep") & (t["source"] != "the law")].iloc[0]
    assert simple["b_crit_kind"] == "none" and math.isnan(simple["b_crit"])  # no gns.json: nothing to scale


def test_the_verdict_gives_the_prediction_on_its_first_line_and_the_figure_is_drawn(reported):
    md = (reported / "report.md").read_text()
    first = md.split("## Verdict\n\n")[1].splitlines()[0]
    assert first.startswith("- sgd-none: B_crit ~ ") and " at val_top1 0.9" in first
    assert "; predicted " in first and first.endswith(" at 0.95") and len(first) <= 200, first
    assert (reported / "figures" / "ladder.png").stat().st_size > 10_000
    assert Path(reported / "report.html").read_text().count("B_crit against the target") >= 1
