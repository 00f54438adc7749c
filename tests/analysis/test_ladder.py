"""B_crit against the target and its prediction where training ends (analysis/ladder.py), against values worked
out another way: numpy's least squares, closed forms, hand-made rungs."""

import math

import numpy as np
import pytest

from lbscale.analysis import ladder as L

Z90 = 1.6448536269514722


def rung(target, x, value, ratio=1.5, kind="interval"):
    """A rung whose interval is value / ratio .. value x ratio (log se = ln(ratio) / z)."""
    return L.Rung(target, x, value, value / ratio, value * ratio, kind)


def test_an_exact_power_law_is_given_back():
    rungs = [rung(t, x, 40 * (x / 8000) ** 0.7) for t, x in ((0.6, 1000), (0.65, 2000), (0.7, 4000), (0.75, 8000))]
    law = L.fit_law(rungs)
    assert law.gamma == pytest.approx(0.7) and law.a == pytest.approx(math.log(40)) and law.x_top == 8000
    assert law.chi2 == pytest.approx(0, abs=1e-18) and not law.scaled and law.rungs == 4
    # the slope's standard error with equal weights: s / sqrt(sum (u - mean u)^2), s = ln 1.5 / z
    u = np.log([1000, 2000, 4000, 8000])
    assert law.gamma_se == pytest.approx(math.log(1.5) / Z90 / math.sqrt(((u - u.mean()) ** 2).sum()))


def test_the_weighted_fit_is_least_squares_on_rows_scaled_by_their_weights():
    rng = np.random.default_rng(0)
    x = np.array([900, 1500, 2600, 4000, 7000.0])
    ratios = np.array([2.5, 2.0, 1.8, 1.4, 1.3])
    values = 30 * (x / 7000) ** 0.9 * np.exp(0.3 * rng.standard_normal(5))
    rungs = [rung(0.5 + 0.05 * i, xi, v, r) for i, (xi, v, r) in enumerate(zip(x, values, ratios))]
    law = L.fit_law(rungs)
    se = np.log(ratios) / Z90
    design = np.column_stack([np.ones(5), np.log(x / 7000)]) / se[:, None]
    coef, res, *_ = np.linalg.lstsq(design, np.log(values) / se, rcond=None)
    assert (law.a, law.gamma) == pytest.approx(tuple(coef))
    assert law.chi2 == pytest.approx(float(res[0]))
    cov = np.linalg.inv(design.T @ design)
    scale = max(law.chi2 / 3, 1.0)
    assert law.gamma_se == pytest.approx(math.sqrt(cov[1, 1] * scale))
    assert law.scaled == (law.chi2 / 3 > 1)
    from scipy.stats import chi2

    assert law.lack_p == pytest.approx(chi2.sf(law.chi2, 3))


def test_rungs_without_two_ends_do_not_enter_and_too_few_fit_nothing():
    rungs = [rung(0.6, 1000, 20), rung(0.65, 2000, 30), L.Rung(0.7, 4000, 50, 30, math.inf, "lower"),
             rung(0.75, 8000, 70)]
    assert L.fit_law(rungs).rungs == 3
    assert L.fit_law(rungs[:2] + rungs[2:3]) is None


def test_the_prediction_extends_the_top_rung_by_the_slope_with_both_errors():
    rungs = [rung(t, x, 40 * (x / 8000) ** 0.7) for t, x in ((0.6, 1000), (0.65, 2000), (0.7, 4000), (0.75, 8000))]
    law = L.fit_law(rungs)
    # the reference run at batch 16 took x* samples; on McCandlish's curve E* = x* / (1 + 16 / B*), and B* = 40 (E*
    # / 8000)^0.7: B* = 40 x 3^0.7 = 86.0 where E* = 24,000, so x* = 24,000 (1 + 16 / 86.0)
    b = 40 * 3 ** 0.7
    p = L.predict(law, rungs[-1], 0.84, 24000 * (1 + 16 / b), 16)
    assert p.kind == "interval" and p.stretch == pytest.approx(3.0)
    assert p.value == pytest.approx(b)
    sd = math.sqrt((math.log(1.5) / Z90) ** 2 + (math.log(3) * law.gamma_se) ** 2)
    assert (p.lo, p.hi) == (pytest.approx(p.value * math.exp(-Z90 * sd)), pytest.approx(p.value * math.exp(Z90 * sd)))


def test_what_it_will_not_predict_it_says():
    rungs = [rung(t, x, 40 * (x / 8000) ** 0.7) for t, x in ((0.6, 1000), (0.65, 2000), (0.7, 4000), (0.75, 8000))]
    law = L.fit_law(rungs)
    far = L.predict(law, rungs[-1], 0.9, 8000 * 5, 1e-9)  # a batch of ~0: x* is E* itself
    assert far.kind == "none" and "5.0x the training" in far.reason and far.stretch == pytest.approx(5)
    assert "did not reach 0.9" in L.predict(law, rungs[-1], 0.9, None, 16).reason
    assert L.predict(None, rungs[-1], 0.84, 16000, 16).kind == "none"
    assert L.duration(3000, 16, 48) == pytest.approx(3000 / (1 + 16 / 48))


def test_the_second_predictor_scales_b_simple_by_the_studys_own_ratio():
    top = rung(0.75, 8000, 40, 1.5)
    star, at_top = (300.0, 200.0, 450.0), (150.0, 100.0, 225.0)
    p = L.ratio_prediction(star, top, at_top, 0.84)
    assert p.value == pytest.approx(300 * 40 / 150)
    sd = math.sqrt(2 * (math.log(2.25) / (2 * Z90)) ** 2 + (math.log(1.5) / Z90) ** 2)
    assert p.lo == pytest.approx(p.value * math.exp(-Z90 * sd))
    assert L.ratio_prediction((300.0, 200.0, math.inf), top, at_top, 0.84).kind == "none"
    a = L.Prediction(0.84, 80, 60, 100, "interval", 3.0)
    assert L.disagree(a, p) == (p.lo > 100 or p.hi < 60) and not L.disagree(a, a)


def test_the_ladders_targets_run_evenly_up_to_the_studys_own():
    assert L.ladder_targets(0.6, 0.77, 5) == [0.6, 0.642, 0.685, 0.727, 0.77]
    assert L.ladder_targets(0.8, 0.77) == [0.77]
